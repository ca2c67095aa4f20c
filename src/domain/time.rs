//! Instants of the store's clock, as the API shows them: RFC 3339, UTC,
//! milliseconds (`2026-12-03T14:55:00.123Z`).

use std::fmt;

/// Milliseconds since the Unix epoch, read from the store's clock (Redis
/// `TIME`; the embedded store's wall clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StoreTime(pub u64);

impl StoreTime {
    /// Parses `YYYY-MM-DDTHH:MM:SS.mmmZ` (exactly the form this service
    /// writes; other RFC 3339 forms are not needed by its clients).
    pub fn parse(text: &str) -> Option<Self> {
        let b = text.as_bytes();
        if b.len() != 24 || b[23] != b'Z' {
            return None;
        }
        let num = |range: std::ops::Range<usize>| -> Option<u64> {
            let part = text.get(range)?;
            if part.bytes().all(|c| c.is_ascii_digit()) {
                part.parse().ok()
            } else {
                None
            }
        };
        let seps = [
            (4, b'-'),
            (7, b'-'),
            (10, b'T'),
            (13, b':'),
            (16, b':'),
            (19, b'.'),
        ];
        if seps.iter().any(|&(i, c)| b[i] != c) {
            return None;
        }
        let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (h, mi, s, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
        if !(1..=12).contains(&mo)
            || d == 0
            || d > days_in_month(y, mo)
            || h > 23
            || mi > 59
            || s > 59
        {
            return None;
        }
        let days = days_from_civil(y, mo, d)?;
        Some(Self(((days * 24 + h) * 60 + mi) * 60_000 + s * 1000 + ms))
    }
}

impl StoreTime {
    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` as bytes on the stack: every lease answer
    /// carries two of these, and formatting through `fmt` (then escaping
    /// character by character for JSON) was most of what the record added
    /// to an acquire's cost. Lease answers write it as it is
    /// (`http::lease_json`).
    pub(crate) fn ascii(self) -> [u8; 24] {
        let ms = self.0 % 1000;
        let secs = self.0 / 1000;
        let (days, rest) = (secs / 86_400, secs % 86_400);
        let (y, mo, d) = civil_from_days(days);
        let mut out = *b"0000-00-00T00:00:00.000Z";
        // Two digits per step (`v` below 100), from a table: a division
        // per digit was half of this function's cost.
        let mut two = |at: usize, v: u64| {
            let v = usize::try_from(v % 100).unwrap_or(0) * 2;
            out[at..at + 2].copy_from_slice(&PAIRS[v..v + 2]);
        };
        two(0, y / 100);
        two(2, y);
        two(5, mo);
        two(8, d);
        two(11, rest / 3600);
        two(14, rest / 60 % 60);
        two(17, rest % 60);
        two(20, ms / 10);
        two(21, ms);
        out
    }
}

/// `00` to `99`, each number's two digits.
const PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

impl fmt::Display for StoreTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ascii = self.ascii();
        f.write_str(std::str::from_utf8(&ascii).map_err(|_| fmt::Error)?)
    }
}

impl serde::Serialize for StoreTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ascii = self.ascii();
        match std::str::from_utf8(&ascii) {
            Ok(text) => s.serialize_str(text),
            Err(_) => s.collect_str(self),
        }
    }
}

impl<'de> serde::Deserialize<'de> for StoreTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&raw)
            .ok_or_else(|| serde::de::Error::custom("not a YYYY-MM-DDTHH:MM:SS.mmmZ time"))
    }
}

fn is_leap(y: u64) -> bool {
    (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400)
}

fn days_in_month(y: u64, m: u64) -> u64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm, for years from 1970 on).
fn days_from_civil(y: u64, m: u64, d: u64) -> Option<u64> {
    let y = if m <= 2 { y.checked_sub(1)? } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(StoreTime(0).to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            StoreTime(1_764_686_400_123).to_string(),
            "2025-12-02T14:40:00.123Z"
        );
        assert_eq!(
            StoreTime(951_782_400_000).to_string(),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn parse_is_the_inverse_of_display() {
        for ms in [
            0,
            1,
            999,
            951_782_400_000,
            1_764_686_400_123,
            4_102_444_799_999,
        ] {
            let text = StoreTime(ms).to_string();
            assert_eq!(StoreTime::parse(&text), Some(StoreTime(ms)), "{text}");
        }
        // Every day across a few leap cycles.
        for day in (0..(4 * 366 * 3)).map(|d| 10_957 + d) {
            let ms = day * 86_400_000 + 43_200_007;
            assert_eq!(
                StoreTime::parse(&StoreTime(ms).to_string()),
                Some(StoreTime(ms))
            );
        }
    }

    #[test]
    fn parse_rejects_other_shapes() {
        for bad in [
            "",
            "2026-12-03T14:55:00Z",
            "2026-12-03T14:55:00.123+00:00",
            "2026-13-03T14:55:00.123Z",
            "2026-02-30T14:55:00.123Z",
            "2026-12-03T24:00:00.000Z",
            "2026-12-03 14:55:00.123Z",
            "+026-12-03T14:55:00.123Z",
            "1969-12-31T23:59:59.999Z",
        ] {
            assert_eq!(StoreTime::parse(bad), None, "{bad}");
        }
    }
}
