//! One module per Lua script (`lua/<name>.lua` ↔ `<name>.rs`): each names
//! its script's `KEYS` and `ARGV` as the script's header does, in the same
//! order (a unit test reads the header and checks), makes the call and
//! decodes the reply by named positions. Changing a script's arguments
//! touches its `.lua` file and its module here, nothing else.

mod acquire;
mod decode;
mod evalsha;
#[cfg(test)]
mod header;
mod inspect;
mod queue;
mod release;
mod renew;

pub use self::evalsha::Script;
