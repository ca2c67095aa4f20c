//! The lease verbs, one enum (issue 40). Every place that must know each
//! verb matches it exhaustively, so a new verb fails to compile until each
//! has been told what to do with it (docs/architecture.md, "Adding a
//! verb"):
//!
//! | where | what it decides |
//! | --- | --- |
//! | [`Verb::of`], [`Verb::method_label`] | its method, and the method label of its metrics |
//! | `lanes::classify` | whether the hand-written paths may serve it |
//! | `leases::serve` | its handler, called without the router |
//! | `lease_json::written_here` | whether its answer is written by hand |
//!
//! A leaf module: it imports nothing of `crate::http`.

use axum::http::Method;

/// A verb on `/leases/{purpose}/{digest}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `PUT`: acquire (or wait for) the lease.
    Acquire,
    /// `PATCH`: renew a held lease.
    Renew,
    /// `DELETE`: release a held lease.
    Release,
    /// `GET`: inspect the lease.
    Inspect,
}

impl Verb {
    /// The verb of `method` on the lease route, if any.
    pub fn of(method: &Method) -> Option<Self> {
        match *method {
            Method::PUT => Some(Self::Acquire),
            Method::PATCH => Some(Self::Renew),
            Method::DELETE => Some(Self::Release),
            Method::GET => Some(Self::Inspect),
            _ => None,
        }
    }

    /// The verb of a request line's method token, as on the wire (methods
    /// are case-sensitive).
    pub fn of_token(method: &str) -> Option<Self> {
        match method {
            "PUT" => Some(Self::Acquire),
            "PATCH" => Some(Self::Renew),
            "DELETE" => Some(Self::Release),
            "GET" => Some(Self::Inspect),
            _ => None,
        }
    }

    /// Its method.
    pub fn method(self) -> Method {
        match self {
            Self::Acquire => Method::PUT,
            Self::Renew => Method::PATCH,
            Self::Release => Method::DELETE,
            Self::Inspect => Method::GET,
        }
    }

    /// The `method` label of its HTTP metrics.
    pub const fn method_label(self) -> &'static str {
        match self {
            Self::Acquire => "PUT",
            Self::Renew => "PATCH",
            Self::Release => "DELETE",
            Self::Inspect => "GET",
        }
    }

    /// Whether it may change the lease (a timed-out call is then
    /// `indeterminate`, never a clean failure).
    pub const fn mutates(self) -> bool {
        match self {
            Self::Acquire | Self::Renew | Self::Release => true,
            Self::Inspect => false,
        }
    }

    /// Whether its request may carry a query (inspect's `?` options); the
    /// mutating verbs take none, and a query on one goes to the router.
    pub const fn takes_query(self) -> bool {
        match self {
            Self::Inspect => true,
            Self::Acquire | Self::Renew | Self::Release => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Verb;

    #[test]
    fn each_verb_is_its_method() {
        for verb in [Verb::Acquire, Verb::Renew, Verb::Release, Verb::Inspect] {
            assert_eq!(Verb::of(&verb.method()), Some(verb));
            assert_eq!(Verb::of_token(verb.method().as_str()), Some(verb));
            assert_eq!(verb.method_label(), verb.method().as_str());
        }
        assert_eq!(Verb::of_token("put"), None);
        assert_eq!(Verb::of(&axum::http::Method::HEAD), None);
    }
}
