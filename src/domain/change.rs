//! [`Change`]: what happened to a resource, the event every store reports
//! and every waiter and watcher hears of.

/// What happened to a resource, as a store reports it (the Redis scripts
/// publish `<tag>\t<version>\t<kind>` on the wake-up channel; the embedded
/// store calls [`WaitRegistry::changed`](crate::notify::WaitRegistry::changed) directly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Someone acquired it (published only while an instance watches it).
    Acquired,
    /// Its holder released it.
    Released,
    /// Its holder's TTL ran out (seen by a watcher's timer, never published).
    Expired,
    /// Its holder label changed (published only while watched).
    HolderChanged,
}

impl Change {
    /// Every change, in the order the document lists their events.
    pub const ALL: [Change; 4] = [
        Change::Acquired,
        Change::Released,
        Change::Expired,
        Change::HolderChanged,
    ];

    /// The event name (`acquired`, `released`, `expired`, `holder_changed`).
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Acquired => "acquired",
            Change::Released => "released",
            Change::Expired => "expired",
            Change::HolderChanged => "holder_changed",
        }
    }

    /// Parses an event name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "acquired" => Change::Acquired,
            "released" => Change::Released,
            "expired" => Change::Expired,
            "holder_changed" => Change::HolderChanged,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Change;

    #[test]
    fn all_lists_every_change_once_and_names_parse_back() {
        for change in Change::ALL {
            // A new variant fails to compile here until it is listed.
            let index = match change {
                Change::Acquired => 0,
                Change::Released => 1,
                Change::Expired => 2,
                Change::HolderChanged => 3,
            };
            assert_eq!(Change::ALL[index], change);
            assert_eq!(Change::parse(change.as_str()), Some(change));
        }
    }
}
