//! `allow-key-locking`: the Upstash-only script flag that stock Redis refuses
//! ("Unexpected flag in script shebang"). Scripts are run without it, and
//! the sha1 of the original text is remembered so that `EVALSHA` of it works.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The flag stock Redis does not know.
const ALLOW_KEY_LOCKING: &[u8] = b"allow-key-locking";

/// How many original scripts are remembered. Past that, new scripts still
/// run (EVAL and SCRIPT LOAD strip them), but EVALSHA of their original sha
/// answers NOSCRIPT, and clients fall back to EVAL.
const MAX_SCRIPTS: usize = 10_000;

/// The length of a sha1 in hex.
const SHA_HEX: usize = 40;

/// A script as Redis runs it: the original text without `allow-key-locking`.
#[derive(Debug)]
pub(crate) struct Stripped {
    /// The text sent to Redis.
    pub(crate) text: Vec<u8>,
    /// The sha1 of `text`, lowercase hex, as Redis names it.
    pub(crate) sha: String,
}

/// The scripts learned from EVAL and SCRIPT LOAD: original sha → stripped text.
#[derive(Debug, Default)]
pub(crate) struct Scripts {
    by_original_sha: Mutex<HashMap<String, Arc<Stripped>>>,
}

impl Scripts {
    /// The script to run for `original`: `None` when it needs no change;
    /// otherwise the stripped script, remembered under the original's sha.
    pub(crate) fn learn(&self, original: &[u8]) -> Option<Arc<Stripped>> {
        let text = strip(original)?;
        let original_sha = sha1_hex(original);
        let mut map = self
            .by_original_sha
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = map.get(&original_sha) {
            return Some(Arc::clone(known));
        }
        let stripped = Arc::new(Stripped {
            sha: sha1_hex(&text),
            text,
        });
        if map.len() < MAX_SCRIPTS {
            map.insert(original_sha, Arc::clone(&stripped));
        }
        Some(stripped)
    }

    /// The stripped script whose original has sha1 `sha` (any case), if learned.
    pub(crate) fn lookup(&self, sha: &[u8]) -> Option<Arc<Stripped>> {
        // Every learned sha is 40 hex digits: anything else is not one.
        let mut lower: [u8; SHA_HEX] = sha.try_into().ok()?;
        lower.make_ascii_lowercase();
        let sha = std::str::from_utf8(&lower).ok()?;
        self.by_original_sha
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(sha)
            .cloned()
    }
}

/// The sha1 of `bytes` in lowercase hex, as Redis names scripts.
pub(crate) fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

/// `script` without `allow-key-locking` in its `#!` shebang's flags, or
/// `None` when it has no such flag. Other flags and options are kept; when
/// nothing but the engine would remain, the shebang line's text is dropped
/// (its newline is kept, so Lua's line numbers still match the original).
pub(crate) fn strip(script: &[u8]) -> Option<Vec<u8>> {
    if !script.starts_with(b"#!") {
        return None;
    }
    let line_end = script
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(script.len());
    let (line, rest) = script.split_at(line_end);
    let mut parts = line
        .split(|b| b.is_ascii_whitespace())
        .filter(|part| !part.is_empty());
    let engine = parts.next()?;
    let mut kept: Vec<Vec<u8>> = Vec::new();
    let mut found = false;
    for part in parts {
        match part.strip_prefix(b"flags=") {
            Some(flags) => {
                let remaining: Vec<&[u8]> = flags
                    .split(|&b| b == b',')
                    .filter(|flag| {
                        let locking = flag.trim_ascii() == ALLOW_KEY_LOCKING;
                        found |= locking;
                        !locking && !flag.is_empty()
                    })
                    .collect();
                if !remaining.is_empty() {
                    kept.push([b"flags=".as_slice(), &remaining.join(&b',')].concat());
                }
            }
            None => kept.push(part.to_vec()),
        }
    }
    if !found {
        return None;
    }
    let mut out = Vec::with_capacity(script.len());
    if !kept.is_empty() {
        out.extend_from_slice(engine);
        for part in kept {
            out.push(b' ');
            out.extend_from_slice(&part);
        }
    }
    out.extend_from_slice(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripped(script: &str) -> Option<String> {
        strip(script.as_bytes()).map(|s| String::from_utf8(s).unwrap_or_default())
    }

    #[test]
    fn at_most_max_scripts_are_remembered() {
        let scripts = Scripts::default();
        let text = |i: usize| format!("#!lua flags=allow-key-locking\nreturn {i}");
        for i in 0..=MAX_SCRIPTS {
            assert!(scripts.learn(text(i).as_bytes()).is_some());
        }
        let sha = |i: usize| sha1_hex(text(i).as_bytes());
        assert!(scripts.lookup(sha(MAX_SCRIPTS - 1).as_bytes()).is_some());
        assert!(
            scripts.lookup(sha(MAX_SCRIPTS).as_bytes()).is_none(),
            "one past the bound was kept"
        );
    }

    #[test]
    fn drops_the_shebang_text_when_the_flag_was_the_only_one() {
        assert_eq!(
            stripped("#!lua flags=allow-key-locking\nreturn 1").as_deref(),
            Some("\nreturn 1")
        );
        assert_eq!(
            stripped("#!lua flags=allow-key-locking").as_deref(),
            Some("")
        );
        assert_eq!(
            stripped("#!lua flags=allow-key-locking\r\nreturn 1").as_deref(),
            Some("\nreturn 1")
        );
    }

    #[test]
    fn keeps_the_other_flags_and_options() {
        assert_eq!(
            stripped("#!lua flags=no-writes,allow-key-locking,allow-stale\nreturn 1").as_deref(),
            Some("#!lua flags=no-writes,allow-stale\nreturn 1")
        );
        assert_eq!(
            stripped("#!lua  name=x flags=allow-key-locking\nreturn 1").as_deref(),
            Some("#!lua name=x\nreturn 1")
        );
    }

    #[test]
    fn leaves_scripts_without_the_flag_alone() {
        assert_eq!(stripped("return 1"), None);
        assert_eq!(stripped("#!lua flags=no-writes\nreturn 1"), None);
        assert_eq!(stripped("#!lua\nreturn 1"), None);
        assert_eq!(stripped("return '#!lua flags=allow-key-locking'"), None);
        assert_eq!(stripped("\n#!lua flags=allow-key-locking\n"), None);
    }

    #[test]
    fn remembers_stripped_scripts_by_their_original_sha() {
        let scripts = Scripts::default();
        let original = b"#!lua flags=allow-key-locking\nreturn 1";
        let learned = scripts.learn(original).map(|s| s.sha.clone());
        assert_eq!(learned.as_deref(), Some(sha1_hex(b"\nreturn 1").as_str()));
        let upper = sha1_hex(original).to_ascii_uppercase();
        assert_eq!(
            scripts.lookup(upper.as_bytes()).map(|s| s.text.clone()),
            Some(b"\nreturn 1".to_vec())
        );
        assert!(scripts.learn(b"return 2").is_none());
        assert!(scripts.lookup(sha1_hex(b"return 2").as_bytes()).is_none());
    }

    #[test]
    fn sha1_matches_redis() {
        // redis-cli SCRIPT LOAD "return 1"
        assert_eq!(
            sha1_hex(b"return 1"),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
    }
}
