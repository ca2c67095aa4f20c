//! Unit tests of Sentinel's pure decisions: epochs, reports, replies.
use super::*;

fn report(addr: &str, epoch: u64, failover: bool) -> Report {
    Report {
        addr: addr.into(),
        epoch,
        failover,
    }
}

#[test]
fn every_sentinels_switch_announcement_raises_the_floor_once() {
    let mut e = Epochs::default();
    assert_eq!(
        e.decide(vec![report("a:1", 0, false); 3], 3),
        Decision::Follow("a:1".into())
    );
    // Failover 1 to b (epoch 1): a re-check sees it between the
    // announcements of the three sentinels.
    e.switched("b:1");
    assert_eq!(
        e.decide(vec![report("b:1", 1, false); 3], 3),
        Decision::Follow("b:1".into())
    );
    e.switched("b:1");
    e.switched("b:1");
    // An aborted failover afterwards: the sentinels report b at epoch 1.
    assert_eq!(
        e.decide(vec![report("b:1", 1, true); 3], 3),
        Decision::Pause
    );
    assert_eq!(
        e.decide(vec![report("b:1", 1, false); 3], 3),
        Decision::Follow("b:1".into()),
        "after an aborted failover the master must be followed again"
    );
    // Failover 2 to a (epoch 2), then a stale sentinel still says b.
    e.switched("a:1");
    assert_eq!(
        e.decide(vec![report("b:1", 1, false)], 3),
        Decision::Keep,
        "an older report must not move writes back"
    );
    assert_eq!(
        e.decide(vec![report("b:1", 1, false), report("a:1", 2, false)], 3),
        Decision::Follow("a:1".into())
    );
}

#[test]
fn a_floor_above_what_every_sentinel_says_gives_way() {
    let mut e = Epochs {
        seen: 7,
        seen_addr: "b:1".into(),
        floor: 9,
        generation: 0,
    };
    assert_eq!(
        e.decide(vec![report("b:1", 7, false); 2], 3),
        Decision::Keep,
        "not every sentinel answered: keep waiting"
    );
    assert_eq!(
        e.decide(vec![report("b:1", 7, false); 3], 3),
        Decision::Follow("b:1".into())
    );
}

#[test]
fn sentinel_master_reply_parses() {
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    let reply = Value::Array(vec![
        bulk("ip"),
        bulk("10.0.0.1"),
        bulk("port"),
        bulk("6380"),
        bulk("flags"),
        bulk("master,failover_in_progress"),
    ]);
    let map = field_map(&reply).expect("parses");
    assert_eq!(map["ip"], "10.0.0.1");
    assert_eq!(map["flags"], "master,failover_in_progress");
}
