//! Reading a rules file, with errors that say where: `FILE:LINE:COL: …`.
//!
//! `RuleSet::from_toml` keeps only the message of a TOML error, so the
//! text is parsed here first: a syntax error is placed by the TOML parser's
//! span, and a rule the core refuses is placed at its table (or at the
//! field it names, for an unknown field).

use std::ops::Range;
use std::path::Path;

use tollgate::{Error, RuleSet};
use toml::de::{DeTable, DeValue};

use crate::failure::{Failure, one_line};

/// The rules in `path`, or `None` for the shipped defaults.
pub(crate) fn load_or_defaults(path: Option<&Path>) -> Result<RuleSet, Failure> {
    match path {
        Some(path) => load(path),
        None => Ok(RuleSet::defaults()),
    }
}

/// The rules in the file at `path`, every rule checked.
pub(crate) fn load(path: &Path) -> Result<RuleSet, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::with(format_args!("cannot read {}", path.display()), &e))?;
    parse(&path.display().to_string(), &text)
}

/// The rules in `text`, read from the file called `file` (for messages).
pub(crate) fn parse(file: &str, text: &str) -> Result<RuleSet, Failure> {
    let table = match toml::from_str::<toml::Table>(text) {
        Ok(table) => table,
        Err(err) => {
            let at = err.span().map_or(0, |span| span.start);
            let (line, col) = position(text, at);
            return Err(Failure::new(format!(
                "{file}:{line}:{col}: invalid TOML: {}",
                one_line(err.message())
            )));
        }
    };
    let err = match RuleSet::from_toml(text) {
        Ok(rules) => return Ok(rules),
        Err(err) => err,
    };
    let message = one_line(&err.to_string());
    match locate(text, &table, &err) {
        Some(at) => {
            let (line, col) = position(text, at);
            Err(Failure::new(format!("{file}:{line}:{col}: {message}")))
        }
        None => Err(Failure::new(format!("{file}: {message}"))),
    }
}

/// The byte offset of what `err` is about: the field it names as unknown,
/// else the name of the rule it is about (in its table header).
fn locate(text: &str, table: &toml::Table, err: &Error) -> Option<usize> {
    let rule = match err {
        Error::InvalidRule { rule, .. } => rule.clone(),
        _ => first_refused(table)?,
    };
    let document = DeTable::parse(text).ok()?;
    let (key, value) = document
        .get_ref()
        .iter()
        .find(|(key, _)| key.get_ref().as_ref() == rule)?;
    let message = err.to_string();
    let field = unknown_field(&message);
    if let (Some(field), DeValue::Table(body)) = (field, value.get_ref())
        && let Some((inner, _)) = body.iter().find(|(k, _)| k.get_ref().as_ref() == field)
    {
        return Some(start(inner.span()));
    }
    Some(start(key.span()))
}

/// The name of the first rule of `table` that the core refuses on its own.
fn first_refused(table: &toml::Table) -> Option<String> {
    table.iter().find_map(|(name, body)| {
        let mut one = toml::Table::new();
        one.insert(name.clone(), body.clone());
        let text = toml::to_string(&one).ok()?;
        RuleSet::from_toml(&text).is_err().then(|| name.clone())
    })
}

/// The field named by serde's "unknown field `x`, expected …".
fn unknown_field(message: &str) -> Option<&str> {
    let rest = &message[message.find("unknown field `")? + "unknown field `".len()..];
    rest.split_once('`').map(|(field, _)| field)
}

fn start(span: Range<usize>) -> usize {
    span.start
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |at| at + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        match parse("r.toml", text) {
            Ok(rules) => panic!("accepted {text:?}: {rules:?}"),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn positions_count_lines_and_characters_from_one() {
        assert_eq!(position("abc", 0), (1, 1));
        assert_eq!(position("a\nbc", 3), (2, 2));
        assert_eq!(position("é\nxé=", 6), (2, 3));
        assert_eq!(position("é\nxé=", 5), (2, 2));
        assert_eq!(position("ab", 99), (1, 3));
    }

    #[test]
    fn syntax_errors_are_placed_by_the_parser() {
        let message = error("[a]\nmax = 1\nwindow = \"1d\n");
        assert!(message.starts_with("r.toml:3:"), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }

    #[test]
    fn refused_rules_are_placed_at_their_table_or_unknown_field() {
        let ok = "[ok]\nmax = 1\nwindow = 1\n\n";
        assert_eq!(
            error(&format!("{ok}[ask]\nmax = 0\nwindow = \"1d\"\n")),
            "r.toml:5:2: invalid rule `ask`: max must be at least 1"
        );
        let message = error(&format!("{ok}[b]\nmax = 1\nwindow = 1\nmaximum = 3\n"));
        assert!(
            message.starts_with("r.toml:8:1: invalid rules file: unknown field `maximum`"),
            "{message}"
        );
        let message = error(&format!("{ok}[c]\nmax = 1\n"));
        assert!(message.starts_with("r.toml:5:2: "), "{message}");
        let message = error(&format!("{ok}[ \"a:b\" ]\nmax = 1\nwindow = 1\n"));
        assert!(
            message.starts_with("r.toml:5:3: invalid rule `a:b`"),
            "{message}"
        );
    }
}
