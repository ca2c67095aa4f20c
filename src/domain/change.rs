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
    /// An operator broke it, or one of its permits (`POST …/break`).
    Revoked,
}

impl Change {
    /// Every change, in the order the document lists their events.
    pub const ALL: [Change; 5] = [
        Change::Acquired,
        Change::Released,
        Change::Expired,
        Change::HolderChanged,
        Change::Revoked,
    ];

    /// The event name (`acquired`, `released`, `expired`, `holder_changed`, `revoked`).
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Acquired => "acquired",
            Change::Released => "released",
            Change::Expired => "expired",
            Change::HolderChanged => "holder_changed",
            Change::Revoked => "revoked",
        }
    }

    /// Parses an event name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "acquired" => Change::Acquired,
            "released" => Change::Released,
            "expired" => Change::Expired,
            "holder_changed" => Change::HolderChanged,
            "revoked" => Change::Revoked,
            _ => return None,
        })
    }
}

/// Why an operator broke a lease (`reason` of a break): 1 to 256
/// characters, no control characters (the rules of a holder label), so it
/// travels inside one tab-separated store message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct BreakReason(String);

impl BreakReason {
    /// Parses a reason.
    pub fn parse(raw: &str) -> Result<Self, super::NameError> {
        super::HolderLabel::parse(raw).map(|_| Self(raw.to_owned()))
    }

    /// The reason as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for BreakReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&raw).map_err(|e| serde::de::Error::custom(e.0))
    }
}

/// Who broke a lease and why, as its `revoked` event tells watchers: the
/// reason given and the *name* of the API key that broke it (never the
/// key; absent when no keys are configured or the key has no name).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Revocation {
    /// The operator's reason, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<BreakReason>,
    /// The breaking API key's public name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_name: Option<String>,
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
                Change::Revoked => 4,
            };
            assert_eq!(Change::ALL[index], change);
            assert_eq!(Change::parse(change.as_str()), Some(change));
        }
    }
}
