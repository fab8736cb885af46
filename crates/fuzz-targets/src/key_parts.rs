//! The `key_parts` target: [`Rule::limit`] with arbitrary key parts.

use arbitrary::{Result, Unstructured};
use tollgate_core::{Error, Limit, MAX_PART_LEN, Rule, Window};

/// The rule the target keys, declaring `parts` key parts (`p0`, `p1`, …).
pub fn rule_with_parts(parts: usize) -> Rule {
    let names: Vec<String> = (0..parts).map(|i| format!("p{i}")).collect();
    Rule::new("fuzz", 1, Window::DAY)
        .and_then(|rule| rule.with_key(&names))
        .unwrap_or_else(|err| panic!("the fuzz rule: {err}"))
}

/// Keys two lists of parts of the same length, the second often a near miss
/// of the first (a `:` moved across a boundary, an escape written out);
/// panics when a property breaks: keys are injective for one rule and one
/// number of parts, a part over [`MAX_PART_LEN`] bytes is refused with its
/// index, and a counter key is `limit:<key>:<index>`.
pub fn key_parts(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok((first, second)) = pair(&mut u) else {
        return;
    };
    let rule = rule_with_parts(first.len());
    let index = u.arbitrary::<u64>().unwrap_or(0);
    let keyed = [&first, &second].map(|parts| limit(&rule, parts, index));
    if let [Some(a), Some(b)] = &keyed {
        assert_eq!(
            first == second,
            a.key() == b.key(),
            "{first:?} and {second:?} give the keys {:?} and {:?}",
            a.key(),
            b.key()
        );
    }
}

/// The limit of `parts`, checked; `None` when a part is too long.
fn limit(rule: &Rule, parts: &[String], index: u64) -> Option<Limit> {
    let too_long = parts.iter().position(|part| part.len() > MAX_PART_LEN);
    match (rule.limit(parts), too_long) {
        (Ok(limit), None) => {
            let key = limit.key();
            assert_eq!(limit.rule(), rule);
            let name = rule.name();
            let prefixed = key.strip_prefix(name).unwrap_or_else(|| panic!("{key:?}"));
            assert!(
                parts.is_empty() == prefixed.is_empty(),
                "{parts:?}: {key:?}"
            );
            let counter = format!("limit:{key}:{index}");
            assert_eq!(limit.counter_key(index), counter, "{parts:?}");
            Some(limit)
        }
        (Err(Error::PartTooLong { index, len }), Some(at)) => {
            assert_eq!((index, len), (at, parts[at].len()), "{parts:?}");
            None
        }
        (result, too_long) => panic!("{parts:?} (too long at {too_long:?}): {result:?}"),
    }
}

/// Two lists of parts of one length.
fn pair(u: &mut Unstructured<'_>) -> Result<(Vec<String>, Vec<String>)> {
    let len = u.int_in_range(0..=4)?;
    let first = (0..len).map(|_| part(u)).collect::<Result<Vec<_>>>()?;
    let mut second = first.clone();
    if len == 0 {
        return Ok((first, second));
    }
    let at = u.choose_index(len)?;
    match u.int_in_range(0..=5)? {
        0 => second = (0..len).map(|_| part(u)).collect::<Result<_>>()?,
        1 => second[at] = second[at].replacen(':', "%3A", 1),
        2 => second[at] = second[at].replacen('%', "%25", 1),
        3 => second[at] = second[at].replacen("%3A", ":", 1).replacen("%25", "%", 1),
        4 if at + 1 < len => {
            // Move the boundary between two parts to another `:`.
            let joined = format!("{}:{}", second[at], second[at + 1]);
            let colons: Vec<usize> = joined.match_indices(':').map(|(i, _)| i).collect();
            let split = *u.choose(&colons)?;
            second[at] = joined[..split].to_owned();
            second[at + 1] = joined[split + 1..].to_owned();
        }
        _ => {
            let mut chars: Vec<char> = second[at].chars().collect();
            let insert = u.choose_index(chars.len() + 1)?;
            chars.insert(insert, *u.choose(&[':', '%', '3', 'A', '2', '5'])?);
            second[at] = chars.into_iter().collect();
        }
    }
    Ok((first, second))
}

/// One part: short text over the characters that matter, any text, or text
/// around [`MAX_PART_LEN`] bytes.
fn part(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(match u.int_in_range(0..=5)? {
        0..=3 => {
            let len = u.int_in_range(0..=8)?;
            (0..len)
                .map(|_| {
                    u.choose(&[':', '%', '3', 'A', 'a', '2', '5', 'é', '\0'])
                        .copied()
                })
                .collect::<Result<_>>()?
        }
        4 => u.arbitrary()?,
        _ => "x".repeat(u.int_in_range(MAX_PART_LEN - 2..=MAX_PART_LEN + 1)?),
    })
}
