//! How much a policy file asks toml to hold, counted before it is parsed. toml builds the whole
//! document before any check runs, in about 1.5 KB per table and 150 to 400 B per value
//! (`sluice policy check` under `/usr/bin/time`: 200 000 `[[classify]]` rules took 319 MB,
//! 2 000 000 array elements 305 MB): an 18 MB file of inline tables ran out of 4 GB, where
//! the file size cap alone bounds nothing. So a file may hold at most [`MAX_TABLES`] tables
//! and [`MAX_VALUES`] values, which keeps toml's part to a few hundred MB and admits the
//! largest tree (65 535 nodes, each with an inline `queue` table).

/// Most tables: `[table]` and `[[array]]` headers and `{ inline }` tables.
pub(super) const MAX_TABLES: usize = 1 << 17;
/// Most values: each `=`, each `,` and each `[` of an array (an upper bound of the keys and
/// array elements).
pub(super) const MAX_VALUES: usize = 1 << 20;

/// What [`scan`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Item {
    Table,
    Value,
}

/// Where `text` first asks for more than [`MAX_TABLES`] tables or [`MAX_VALUES`] values: the
/// byte offset, and whether tables (else values) are too many.
pub(super) fn first_excess(text: &str) -> Option<(usize, bool)> {
    let (mut tables, mut values) = (0, 0);
    let mut excess = None;
    scan(text, |at, item| {
        match item {
            Item::Table => tables += 1,
            Item::Value => values += 1,
        }
        if tables > MAX_TABLES || values > MAX_VALUES {
            excess = Some((at, tables > MAX_TABLES));
        }
        excess.is_none()
    });
    excess
}

/// Call `on` with the offset of each table and value of `text` (outside strings and
/// comments; a `[` that starts a line is a table header, `[[` once, elsewhere an array),
/// until it returns false.
fn scan(text: &str, mut on: impl FnMut(usize, Item) -> bool) {
    let b = text.as_bytes();
    let mut line_start = true;
    let mut i = 0;
    while i < b.len() {
        let at = i;
        let item = match b[i] {
            b'\n' => {
                line_start = true;
                None
            }
            b' ' | b'\t' | b'\r' => None,
            b'#' => {
                i = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p);
                continue;
            }
            q @ (b'"' | b'\'') => {
                i = string_end(b, i, q);
                line_start = false;
                continue;
            }
            c => {
                let header = c == b'[' && line_start;
                if header && b.get(i + 1) == Some(&b'[') {
                    i += 1;
                }
                line_start = false;
                match c {
                    b'[' if header => Some(Item::Table),
                    b'{' => Some(Item::Table),
                    b'[' | b'=' | b',' => Some(Item::Value),
                    _ => None,
                }
            }
        };
        if let Some(item) = item {
            if !on(at, item) {
                return;
            }
        }
        i += 1;
    }
}

/// The index just past the string that opens at `start` with quote `q`: basic (`"`, with
/// backslash escapes) or literal (`'`), on one line or, tripled, on several. An unclosed
/// one runs to the end of its line (one line) or of the text (tripled): toml refuses it.
fn string_end(b: &[u8], start: usize, q: u8) -> usize {
    let escapes = q == b'"';
    let tripled = |i: usize| b.get(i..i + 3) == Some(&[q, q, q][..]);
    let triple = tripled(start);
    let mut i = start + if triple { 3 } else { 1 };
    while i < b.len() {
        match b[i] {
            b'\\' if escapes => i += 1,
            b'\n' if !triple => return i,
            c if c == q && !triple => return i + 1,
            c if c == q && tripled(i) => return i + 3,
            _ => {}
        }
        i += 1;
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(text: &str) -> (usize, usize) {
        let (mut tables, mut values) = (0, 0);
        scan(text, |_, item| {
            match item {
                Item::Table => tables += 1,
                Item::Value => values += 1,
            }
            true
        });
        (tables, values)
    }

    #[test]
    fn tables_and_values_are_counted() {
        let text = "[scheduler]\ncapacity = 10\n[[node]]\nname = \"r\"\n\
                    queue = { kind = \"cffs\", buckets = 8 }\nx = [1, 2, [3]]\n";
        // Tables: the two headers and the inline one. Values: five `=` (two inside the
        // inline table) and its `,`, the arrays' two `[` and two `,`.
        assert_eq!(counts(text), (3, 11));
    }

    #[test]
    fn strings_and_comments_do_not_count() {
        let quiet = "a = \"{[,=\\\"\" # {[,=\nb = '{[,=\\' \nc = \"\"\"\n{[,=\\\"\"\"\"\n\
                     d = '''\n{[,=\n'''\n[e] # [[f]]\n";
        assert_eq!(counts(quiet), (1, 4));
        // An unclosed string ends with its line; a tripled one with the text.
        assert_eq!(counts("a = \"{{\nb = {}\n"), (1, 2));
        assert_eq!(counts("a = '''{{\nb = {}\n"), (0, 1));
    }

    #[test]
    fn the_first_excess_is_where_the_count_passes_the_cap() {
        let tables = "[[classify]]\n".repeat(MAX_TABLES);
        assert_eq!(first_excess(&tables), None);
        let more = format!("{tables}[[classify]]\n");
        assert_eq!(first_excess(&more), Some((tables.len(), true)));
        let values = format!("x = [{}]", "1,".repeat(MAX_VALUES - 2));
        assert_eq!(first_excess(&values), None);
        let more = format!("{values},");
        assert_eq!(first_excess(&more), Some((values.len(), false)));
    }
}
