//! The Lua scripts as Redis runs them, assembled at compile time: each
//! entry file `lua/<name>.lua` (its `KEYS`/`ARGV` header, then its body)
//! with every line `--#include <path>` replaced by the file it names
//! (`<path>` relative to `lua/`: a shared helper in `lua/lib/`, or a part
//! of one script in `lua/<script>/`), each file spliced once: where it is
//! first included, its own `--#include` lines spliced the same way; a
//! later include of it adds nothing. The assembly is a `const fn`: an
//! include of a file [`PIECES`] does not list, an include cycle or any
//! other line starting `--#` stops the build. What Redis runs, and what
//! its SHA-1 (EVALSHA) is taken of, is [`Source::assembled`]; a leaf that
//! `script/` uses and the benches and tests read (`leasehold scripts
//! --dump DIR` writes every assembled script).

/// One script: its entry file as written and the text Redis runs.
#[derive(Debug, Clone, Copy)]
pub struct Source {
    /// The script's name: its entry file is `lua/<name>.lua`.
    pub name: &'static str,
    /// The entry file as written (its header is what the argument lists
    /// are checked against).
    pub entry: &'static str,
    /// The entry with its includes spliced in: what Redis runs.
    pub assembled: &'static str,
}

/// Every file an entry may include, by its path below `lua/`.
pub const PIECES: &[(&str, &str)] = &[
    (
        "lib/expiries.lua",
        include_str!("../../../lua/lib/expiries.lua"),
    ),
    ("lib/fence.lua", include_str!("../../../lua/lib/fence.lua")),
    (
        "lib/history.lua",
        include_str!("../../../lua/lib/history.lua"),
    ),
    ("lib/index.lua", include_str!("../../../lua/lib/index.lua")),
    (
        "lib/limits.lua",
        include_str!("../../../lua/lib/limits.lua"),
    ),
    (
        "lib/permit.lua",
        include_str!("../../../lua/lib/permit.lua"),
    ),
    ("lib/prune.lua", include_str!("../../../lua/lib/prune.lua")),
    (
        "lib/queue_until.lua",
        include_str!("../../../lua/lib/queue_until.lua"),
    ),
    ("lib/reply.lua", include_str!("../../../lua/lib/reply.lua")),
    (
        "lib/sequence.lua",
        include_str!("../../../lua/lib/sequence.lua"),
    ),
    ("lib/time.lua", include_str!("../../../lua/lib/time.lua")),
    (
        "lib/tombstone.lua",
        include_str!("../../../lua/lib/tombstone.lua"),
    ),
    (
        "acquire/announce.lua",
        include_str!("../../../lua/acquire/announce.lua"),
    ),
    (
        "acquire/closed.lua",
        include_str!("../../../lua/acquire/closed.lua"),
    ),
    (
        "acquire/fast.lua",
        include_str!("../../../lua/acquire/fast.lua"),
    ),
    (
        "acquire/permits.lua",
        include_str!("../../../lua/acquire/permits.lua"),
    ),
    (
        "acquire/publish.lua",
        include_str!("../../../lua/acquire/publish.lua"),
    ),
    (
        "acquire/queue.lua",
        include_str!("../../../lua/acquire/queue.lua"),
    ),
    (
        "acquire/read.lua",
        include_str!("../../../lua/acquire/read.lua"),
    ),
    (
        "acquire/refused.lua",
        include_str!("../../../lua/acquire/refused.lua"),
    ),
];

/// The line that includes a file: `--#include <path below lua/>`.
const DIRECTIVE: &[u8] = b"--#include ";
/// The most files one script may include (the walk's state is an array).
const MAX_PIECES: usize = 64;

/// `entry` (the file `lua/<$name>.lua`) assembled into a `&'static str`
/// at compile time.
macro_rules! source {
    ($name:literal) => {{
        const ENTRY: &str = include_str!(concat!("../../../lua/", $name, ".lua"));
        const LEN: usize = assembled_len(ENTRY, PIECES);
        const BYTES: [u8; LEN] = assemble::<LEN>(ENTRY, PIECES);
        Source {
            name: $name,
            entry: ENTRY,
            assembled: match std::str::from_utf8(&BYTES) {
                Ok(text) => text,
                Err(_) => panic!("lua: a script is not UTF-8"),
            },
        }
    }};
}

/// `lua/acquire.lua`.
pub const ACQUIRE: Source = source!("acquire");
/// `lua/renew.lua`.
pub const RENEW: Source = source!("renew");
/// `lua/release.lua`.
pub const RELEASE: Source = source!("release");
/// `lua/inspect.lua`.
pub const INSPECT: Source = source!("inspect");
/// `lua/queue.lua`.
pub const QUEUE: Source = source!("queue");
/// `lua/break.lua`.
pub const BREAK: Source = source!("break");
/// `lua/history.lua`.
pub const HISTORY: Source = source!("history");
/// `lua/purposes.lua`.
pub const PURPOSES: Source = source!("purposes");
/// `lua/waiters.lua`.
pub const WAITERS: Source = source!("waiters");
/// `lua/instances.lua`.
pub const INSTANCES: Source = source!("instances");
/// `lua/session.lua`.
pub const SESSION: Source = source!("session");
/// `lua/session_renew.lua`.
pub const SESSION_RENEW: Source = source!("session_renew");

/// `lua/plain_acquire.lua`: acquire.lua's plain lease in brief.
pub const PLAIN_ACQUIRE: Source = source!("plain_acquire");
/// `lua/plain_renew.lua`: renew.lua's plain lease in brief.
pub const PLAIN_RENEW: Source = source!("plain_renew");
/// `lua/plain_release.lua`: release.lua's plain lease in brief.
pub const PLAIN_RELEASE: Source = source!("plain_release");

/// Every script the service runs.
pub const ALL: [Source; 15] = [
    ACQUIRE,
    RENEW,
    RELEASE,
    INSPECT,
    QUEUE,
    BREAK,
    HISTORY,
    PURPOSES,
    WAITERS,
    INSTANCES,
    SESSION,
    SESSION_RENEW,
    PLAIN_ACQUIRE,
    PLAIN_RENEW,
    PLAIN_RELEASE,
];

/// The length of `entry` assembled from `pieces`.
pub const fn assembled_len(entry: &str, pieces: &[(&str, &str)]) -> usize {
    let mut none = [0u8; 0];
    let mut walk = Walk {
        out: &mut none,
        write: false,
        len: 0,
        state: [Spliced::Not; MAX_PIECES],
    };
    splice(entry.as_bytes(), pieces, &mut walk);
    walk.len
}

/// `entry` assembled from `pieces`: `N` must be [`assembled_len`]'s.
pub const fn assemble<const N: usize>(entry: &str, pieces: &[(&str, &str)]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut walk = Walk {
        out: &mut out,
        write: true,
        len: 0,
        state: [Spliced::Not; MAX_PIECES],
    };
    splice(entry.as_bytes(), pieces, &mut walk);
    assert!(walk.len == N, "lua: assembled length changed");
    out
}

/// Where a piece stands in one assembly.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spliced {
    Not,
    Now,
    Done,
}

/// One assembly under way: the text so far (counted only, or written)
/// and each piece's state.
struct Walk<'a> {
    out: &'a mut [u8],
    write: bool,
    len: usize,
    state: [Spliced; MAX_PIECES],
}

/// Appends `text` to `walk`, line by line, splicing each include.
const fn splice(text: &[u8], pieces: &[(&str, &str)], walk: &mut Walk) {
    assert!(
        pieces.len() <= MAX_PIECES,
        "lua: more pieces than MAX_PIECES"
    );
    let mut start = 0;
    while start < text.len() {
        let mut end = start;
        while end < text.len() && text[end] != b'\n' {
            end += 1;
        }
        let next = if end < text.len() { end + 1 } else { end };
        // An include may be indented (inside a block: its locals are the
        // block's); the text is spliced in as it is.
        let mut first = start;
        while first < end && matches!(text[first], b' ' | b'\t') {
            first += 1;
        }
        if starts_with(text, first, end, b"--#") {
            assert!(
                starts_with(text, first, end, DIRECTIVE),
                "lua: a line starts `--#` but is not `--#include <file>`"
            );
            let piece = find(text, first + DIRECTIVE.len(), end, pieces);
            match walk.state[piece] {
                Spliced::Not => {
                    walk.state[piece] = Spliced::Now;
                    splice(pieces[piece].1.as_bytes(), pieces, walk);
                    walk.state[piece] = Spliced::Done;
                }
                Spliced::Now => panic!("lua: include cycle: a file includes itself"),
                Spliced::Done => {}
            }
        } else {
            let mut i = start;
            while i < next {
                if walk.write {
                    walk.out[walk.len] = text[i];
                }
                walk.len += 1;
                i += 1;
            }
        }
        start = next;
    }
}

/// Whether `text[start..end]` starts with `prefix`.
const fn starts_with(text: &[u8], start: usize, end: usize, prefix: &[u8]) -> bool {
    if end - start < prefix.len() {
        return false;
    }
    let mut i = 0;
    while i < prefix.len() {
        if text[start + i] != prefix[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The index in `pieces` of the path `text[start..end]` (trailing blanks
/// and `\r` aside).
const fn find(text: &[u8], start: usize, mut end: usize, pieces: &[(&str, &str)]) -> usize {
    while end > start && matches!(text[end - 1], b' ' | b'\t' | b'\r') {
        end -= 1;
    }
    let mut p = 0;
    while p < pieces.len() {
        let name = pieces[p].0.as_bytes();
        if name.len() == end - start && starts_with(text, start, end, name) {
            return p;
        }
        p += 1;
    }
    panic!("lua: an --#include names a file that PIECES (src/store/redis/lua.rs) does not list")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `entry` assembled at run time (the same functions the build runs).
    fn assembled(entry: &str, pieces: &[(&str, &str)]) -> String {
        let len = assembled_len(entry, pieces);
        let mut walk = Walk {
            out: &mut vec![0u8; len],
            write: true,
            len: 0,
            state: [Spliced::Not; MAX_PIECES],
        };
        splice(entry.as_bytes(), pieces, &mut walk);
        assert_eq!(walk.len, len);
        String::from_utf8(walk.out.to_vec()).expect("utf-8")
    }

    const PARTS: &[(&str, &str)] = &[
        ("lib/a.lua", "-- a\nlocal a = 1\n"),
        ("lib/b.lua", "--#include lib/a.lua\nlocal b = a\n"),
        ("lib/c.lua", "--#include lib/d.lua\n"),
        ("lib/d.lua", "--#include lib/c.lua\n"),
    ];

    #[test]
    fn includes_are_spliced_once_where_first_named() {
        let entry = "-- KEYS[1] x\n--#include lib/b.lua\n--#include lib/a.lua  \nreturn b";
        assert_eq!(
            assembled(entry, PARTS),
            "-- KEYS[1] x\n-- a\nlocal a = 1\nlocal b = a\nreturn b"
        );
        let indented = "if x then\n  --#include lib/a.lua\nend\n";
        assert_eq!(
            assembled(indented, PARTS),
            "if x then\n-- a\nlocal a = 1\nend\n"
        );
    }

    #[test]
    #[should_panic(expected = "include cycle")]
    fn a_cycle_is_refused() {
        assembled("--#include lib/c.lua\n", PARTS);
    }

    #[test]
    #[should_panic(expected = "names a file that PIECES")]
    fn a_missing_file_is_refused() {
        assembled("--#include lib/none.lua\n", PARTS);
    }

    #[test]
    #[should_panic(expected = "is not `--#include")]
    fn a_misspelt_directive_is_refused() {
        assembled("--#inclde lib/a.lua\n", PARTS);
    }

    #[test]
    fn every_script_is_assembled_without_directives() {
        for script in ALL {
            let directive = |l: &str| l.trim_start().starts_with("--#");
            assert!(!script.assembled.lines().any(directive), "{}", script.name);
            assert_eq!(script.assembled, assembled(script.entry, PIECES));
        }
    }

    /// Every file below `lua/` is an entry of [`ALL`] or a piece of
    /// [`PIECES`] that some entry includes: none is left out of the build
    /// (or of luacheck, which reads the assembled scripts).
    #[test]
    fn every_lua_file_is_built() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
        let mut found = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("lua/") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "lua") {
                    let rel = path.strip_prefix(&root).expect("below lua/");
                    found.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        for file in found {
            if let Some(name) = file.strip_suffix(".lua").filter(|n| !n.contains('/')) {
                assert!(ALL.iter().any(|s| s.name == name), "lua/{file}: not in ALL");
                continue;
            }
            let (_, text) = PIECES
                .iter()
                .find(|(path, _)| *path == file)
                .unwrap_or_else(|| panic!("lua/{file}: not in PIECES"));
            let directive = format!("--#include {file}");
            let used = ALL
                .iter()
                .map(|s| s.entry)
                .chain(PIECES.iter().map(|(_, t)| *t))
                .any(|t| t.lines().any(|l| l.trim() == directive));
            assert!(used, "lua/{file}: included by nothing");
            assert!(text.ends_with('\n'), "lua/{file}: no newline at its end");
        }
    }
}
