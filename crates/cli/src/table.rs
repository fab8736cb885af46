//! Plain-text tables: columns padded to their widest cell.

/// Rows under a header, columns two spaces apart, no trailing spaces.
pub(crate) fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            line.push_str(&format!("{cell:<width$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `name  value` lines, the names padded to the longest.
pub(crate) fn pairs(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (name, value) in pairs {
        out.push_str(format!("{name:<width$}  {value}").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_columns_to_the_widest_cell() {
        let rows = vec![vec!["ask".to_owned(), "15".to_owned()]];
        assert_eq!(columns(&["rule", "max"], &rows), "rule  max\nask   15\n");
        assert_eq!(
            pairs(&[("rule", "ask".into()), ("remaining", "1".into())]),
            "rule       ask\nremaining  1\n"
        );
    }
}
