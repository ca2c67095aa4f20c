#!/bin/sh
# Print the source path of every cargo target that Cargo.toml declares
# explicitly ([lib], [[bin]], [[bench]], [[test]], [[example]]), one per line.
#
# Why: the Dockerfile compiles the dependency graph once with stub sources so
# that layer stays cached until Cargo.toml/Cargo.lock change. Cargo refuses to
# load a manifest whose declared target file is missing ("can't find `x`
# bench"), so every declared target needs a stub, not just src/main.rs.
# POSIX sh + awk only: it runs inside the rust builder image, no python there.
set -eu
manifest="${1:-Cargo.toml}"
awk '
function flush() {
  if (kind != "") {
    if (path == "") {
      if (kind == "lib") path = "src/lib.rs"
      else if (kind == "bin" && name == pkg) path = "src/main.rs"
      else if (kind == "bin") path = "src/bin/" name ".rs"
      else if (kind == "bench") path = "benches/" name ".rs"
      else if (kind == "test") path = "tests/" name ".rs"
      else if (kind == "example") path = "examples/" name ".rs"
    }
    if (path != "") print path
  }
  kind = ""; name = ""; path = ""
}
function val(s) { sub(/^[^=]*=[ \t]*/, "", s); sub(/[ \t]*#.*$/, "", s); gsub(/["\047 \t]/, "", s); return s }
/^[ \t]*\[/ {
  flush(); section = $0; gsub(/[ \t]/, "", section)
  if (section ~ /^\[\[(bin|bench|test|example)\]\]/) { kind = section; gsub(/[][]/, "", kind) }
  else if (section ~ /^\[lib\]/) kind = "lib"
  next
}
section ~ /^\[package\]/ && /^[ \t]*name[ \t]*=/ { pkg = val($0) }
kind != "" && /^[ \t]*name[ \t]*=/ { name = val($0) }
kind != "" && /^[ \t]*path[ \t]*=/ { path = val($0) }
END { flush() }
' "$manifest"
