//! [`giveaways`]: what of a planted secret a test looks for in printed text.

/// The parts of `secret` that would give it away, lowercase: its runs of 4
/// or more ASCII letters and digits, a `%XX` escape taken as a separator
/// (so that the escaped and the decoded text both match). A test plants
/// secrets whose runs are unique, and fails when output holds any of them.
pub fn giveaways(secret: &str) -> Vec<String> {
    let mut text = String::new();
    for (i, piece) in secret.split('%').enumerate() {
        text.push(' ');
        text.push_str(if i == 0 {
            piece
        } else {
            piece.get(2..).unwrap_or("")
        });
    }
    text.to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|run| run.len() >= 4)
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_four_or_more_split_at_escapes() {
        assert_eq!(giveaways("Pl5sx+Cl1q%2FVb2n/ab"), ["pl5sx", "cl1q", "vb2n"]);
    }
}
