//! Reading a Lua script's header comment (tests only): the names it gives
//! `KEYS[n]` and `ARGV[n]`, so each script's module can check that the
//! Rust side passes the same arguments in the same order.

/// The names the header of `source` gives `kind` (`"KEYS"` or `"ARGV"`),
/// in index order. The header is the comment lines the file opens with. A
/// name is the words after `ARGV[n] ` up to two spaces, `:`, `;`, `,`,
/// `(`, `.`, ` or ` or the end of the line; only the first mention of an
/// index names it. Panics when an index between 1 and the highest is not
/// named.
pub fn names(source: &str, kind: &str) -> Vec<String> {
    const ENDS: [&str; 7] = ["  ", ":", ";", ",", "(", ".", " or "];
    let open = format!("{kind}[");
    let mut found: Vec<(usize, String)> = Vec::new();
    let header = source
        .lines()
        .take_while(|l| l.starts_with("--") || l.starts_with("#!"));
    for line in header {
        let mut rest = line;
        while let Some(at) = rest.find(&open) {
            rest = &rest[at + open.len()..];
            let Some(close) = rest.find("] ") else {
                break;
            };
            let Ok(n) = rest[..close].parse::<usize>() else {
                continue;
            };
            let text = &rest[close + 2..];
            let end = ENDS
                .iter()
                .filter_map(|e| text.find(e))
                .min()
                .unwrap_or(text.len());
            if !found.iter().any(|(i, _)| *i == n) {
                found.push((n, text[..end].trim().to_owned()));
            }
        }
    }
    found.sort();
    for (want, (n, _)) in (1..).zip(&found) {
        assert_eq!(*n, want, "{kind}[{want}] is not named in the header");
    }
    found.into_iter().map(|(_, name)| name).collect()
}

/// Asserts that the header of `source` names the `keys` and, after them,
/// the `argv` (the trailing nonce appended here) that Rust passes, in
/// order: each script module's test of its argument list.
pub fn assert_lists(source: &str, keys: Vec<String>, mut argv: Vec<String>) {
    assert_eq!(names(source, "KEYS"), keys, "KEYS in the header vs Rust");
    argv.push(super::super::evalsha::NONCE_ARG.to_owned());
    assert_eq!(names(source, "ARGV"), argv, "ARGV in the header vs Rust");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_end_where_the_description_starts() {
        let lua = "-- x: a script\n\
                   -- KEYS[1] record    <ns>:lease  KEYS[2] sequence (see x)\n\
                   -- ARGV[1] owner token  ARGV[2] holder label or ''\n\
                   -- ARGV[3] shape: '' for plain; see KEYS[1] (same slot)\n\
                   -- ARGV[4] nonce, a 32-bit integer.\n\
                   local tag = ARGV[9]\n";
        assert_eq!(names(lua, "KEYS"), ["record", "sequence"]);
        assert_eq!(
            names(lua, "ARGV"),
            ["owner token", "holder label", "shape", "nonce"]
        );
    }

    #[test]
    #[should_panic(expected = "ARGV[2] is not named")]
    fn a_gap_is_a_mistake() {
        names("-- ARGV[1] a  ARGV[3] c\n", "ARGV");
    }
}
