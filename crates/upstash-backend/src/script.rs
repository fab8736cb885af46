//! [`Script`]: a Lua script's text and its SHA-1, computed once per store.

use tollgate_redis_scripts as scripts;

/// One script, sent as `EVALSHA` of its hash (and `EVAL` of its text when the
/// server answers `NOSCRIPT`).
#[derive(Debug)]
pub(crate) struct Script {
    pub(crate) text: &'static str,
    /// Lowercase hex, as Redis names scripts.
    pub(crate) sha: String,
}

impl Script {
    fn new(text: &'static str) -> Script {
        Script {
            text,
            sha: sha1_smol::Sha1::from(text).digest().to_string(),
        }
    }
}

/// Every script a store sends, hashed when the store is opened.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) count: Script,
    pub(crate) reserve: Script,
    pub(crate) refund: Script,
    pub(crate) delete: Script,
    pub(crate) claim: Script,
    pub(crate) finish: Script,
    pub(crate) release: Script,
}

impl Scripts {
    pub(crate) fn new() -> Scripts {
        Scripts {
            count: Script::new(scripts::COUNT),
            reserve: Script::new(scripts::RESERVE),
            refund: Script::new(scripts::REFUND),
            delete: Script::new(scripts::DELETE),
            claim: Script::new(scripts::CLAIM),
            finish: Script::new(scripts::FINISH),
            release: Script::new(scripts::RELEASE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_redis_script_names() {
        // `SCRIPT LOAD "return 1"` answers this sha on every Redis.
        assert_eq!(
            Script::new("return 1").sha,
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        let all = Scripts::new();
        assert_eq!(all.count.sha.len(), 40);
        assert_ne!(all.count.sha, all.reserve.sha);
    }
}
