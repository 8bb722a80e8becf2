//! KIP-848 consumer groups through the coordinator: join, reconciliation with revocation
//! ordering, leave, static leave, session expiry, fencing, offset commits, restart, conversion.

use super::codes::*;
use super::consumer::*;
use super::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use uuid::Uuid;

const T: Uuid = Uuid::from_u128(0x1234);

fn topics(partitions: i32) -> TopicView {
    [("t".to_string(), (T, partitions))].into_iter().collect()
}

fn open(dir: &Path, now: i64) -> GroupCoordinator {
    GroupCoordinator::open(dir, GroupConfig::default(), now).unwrap()
}

fn parts(ps: &[i32]) -> Parts {
    if ps.is_empty() {
        return Parts::new();
    }
    [(T, ps.iter().copied().collect::<BTreeSet<i32>>())]
        .into_iter()
        .collect()
}

fn hb(member: &str, epoch: i32, owned: Option<&[i32]>) -> CgHeartbeat {
    CgHeartbeat {
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: if epoch == 0 { 30_000 } else { -1 },
        subscribed_topic_names: (epoch == 0).then(|| vec!["t".to_string()]),
        owned: owned.map(parts),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        api_version: 1,
        ..Default::default()
    }
}

/// Heartbeats as a well-behaved member would: reports what it owns.
struct Client {
    id: String,
    epoch: i32,
    owned: Parts,
}

impl Client {
    fn join(c: &mut GroupCoordinator, id: &str, now: i64) -> Client {
        let r = c
            .consumer_heartbeat(&hb(id, 0, Some(&[])), &topics(4), now)
            .0;
        assert_eq!(r.error, NONE, "{r:?}");
        Client {
            id: id.into(),
            epoch: r.member_epoch,
            owned: r.assignment.expect("assignment on join"),
        }
    }

    fn beat(&mut self, c: &mut GroupCoordinator, now: i64) -> CgHeartbeatResponse {
        let mut req = hb(&self.id, self.epoch, None);
        req.owned = Some(self.owned.clone());
        let r = c.consumer_heartbeat(&req, &topics(4), now).0;
        if r.error == NONE {
            self.epoch = r.member_epoch;
            if let Some(a) = &r.assignment {
                self.owned = a.clone();
            }
        }
        r
    }

    fn owned(&self) -> Vec<i32> {
        self.owned
            .get(&T)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }
}

#[test]
fn a_joining_member_gets_partitions_only_after_the_owner_revoked_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let mut a = Client::join(&mut c, "a", 0);
    assert_eq!(a.epoch, 1);
    assert_eq!(a.owned(), vec![0, 1, 2, 3]);
    let mut b = Client::join(&mut c, "b", 10);
    // Group epoch 2, target splits 2/2, but a still holds b's partitions.
    assert_eq!(b.epoch, 2);
    assert_eq!(b.owned(), Vec::<i32>::new());
    assert_eq!(c.consumer_describe("g").unwrap().1, "Reconciling");
    // a learns to revoke two partitions; its epoch stays until it acknowledges.
    let r = a.beat(&mut c, 20);
    assert_eq!(r.member_epoch, 1);
    assert_eq!(a.owned().len(), 2);
    let a_kept = a.owned();
    // b still gets nothing: a has not acknowledged yet (it reports owning all four).
    let mut stale = hb("a", 1, Some(&[0, 1, 2, 3]));
    stale.owned = Some(parts(&[0, 1, 2, 3]));
    assert_eq!(
        c.consumer_heartbeat(&stale, &topics(4), 25).0.member_epoch,
        1
    );
    assert!(b.beat(&mut c, 30).assignment.is_none());
    assert_eq!(b.owned(), Vec::<i32>::new());
    // a acknowledges: epoch moves to 2; then b receives the released partitions.
    let r = a.beat(&mut c, 40);
    assert_eq!(r.member_epoch, 2);
    b.beat(&mut c, 50);
    assert_eq!(b.epoch, 2);
    let mut all: Vec<i32> = a_kept.iter().chain(b.owned().iter()).copied().collect();
    all.sort();
    assert_eq!(all, vec![0, 1, 2, 3]);
    assert_eq!(b.owned().len(), 2);
    assert_eq!(c.consumer_describe("g").unwrap().1, "Stable");
}

#[test]
fn leaving_member_hands_its_partitions_over() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let mut a = Client::join(&mut c, "a", 0);
    let mut b = Client::join(&mut c, "b", 0);
    a.beat(&mut c, 1);
    a.beat(&mut c, 2);
    b.beat(&mut c, 3);
    assert_eq!(b.owned().len(), 2);
    let r = c
        .consumer_heartbeat(&hb("b", LEAVE_EPOCH, None), &topics(4), 4)
        .0;
    assert_eq!((r.error, r.member_epoch), (NONE, LEAVE_EPOCH));
    a.beat(&mut c, 5);
    assert_eq!(a.owned(), vec![0, 1, 2, 3]);
    assert!(a.epoch > 2);
    // The departed member is unknown now.
    assert_eq!(b.beat(&mut c, 6).error, UNKNOWN_MEMBER_ID);
}

#[test]
fn stale_or_future_epochs_are_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let mut a = Client::join(&mut c, "a", 0);
    let _b = Client::join(&mut c, "b", 0);
    a.beat(&mut c, 1);
    a.beat(&mut c, 2);
    assert_eq!(a.epoch, 2);
    let r = c.consumer_heartbeat(&hb("a", 3, None), &topics(4), 3).0;
    assert_eq!(r.error, FENCED_MEMBER_EPOCH);
    // Previous epoch with a subset of the assignment: a lost response, accepted.
    let r = c
        .consumer_heartbeat(&hb("a", 1, Some(&[])), &topics(4), 3)
        .0;
    assert_eq!((r.error, r.member_epoch), (NONE, 2));
    let r = c.consumer_heartbeat(&hb("zz", 5, None), &topics(4), 3).0;
    assert_eq!(r.error, UNKNOWN_MEMBER_ID);
    let r = c
        .consumer_heartbeat(
            &CgHeartbeat {
                group_id: "nope".into(),
                ..hb("a", 4, None)
            },
            &topics(4),
            3,
        )
        .0;
    assert_eq!(r.error, GROUP_ID_NOT_FOUND);
}

#[test]
fn fenced_when_epoch_is_two_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let mut a = Client::join(&mut c, "a", 0);
    for (i, m) in ["b", "c"].iter().enumerate() {
        Client::join(&mut c, m, i as i64);
        a.beat(&mut c, 10 + i as i64);
        a.beat(&mut c, 20 + i as i64);
    }
    assert_eq!(a.epoch, 3);
    let r = c.consumer_heartbeat(&hb("a", 1, None), &topics(4), 30).0;
    assert_eq!(r.error, FENCED_MEMBER_EPOCH);
}

#[test]
fn session_expiry_removes_the_member_and_frees_its_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let mut a = Client::join(&mut c, "a", 0);
    let mut b = Client::join(&mut c, "b", 0);
    a.beat(&mut c, 1);
    a.beat(&mut c, 2);
    b.beat(&mut c, 3);
    // Only a keeps heartbeating.
    a.beat(&mut c, 40_000);
    c.tick(46_000);
    a.beat(&mut c, 46_001);
    assert_eq!(a.owned(), vec![0, 1, 2, 3]);
    assert_eq!(b.beat(&mut c, 46_002).error, UNKNOWN_MEMBER_ID);
}

#[test]
fn group_configs_set_the_groups_session_timeout_and_heartbeat_interval() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let configs: BTreeMap<String, BTreeMap<String, String>> = [(
        "g".to_string(),
        [
            (
                "consumer.session.timeout.ms".to_string(),
                "50000".to_string(),
            ),
            (
                "consumer.heartbeat.interval.ms".to_string(),
                "6000".to_string(),
            ),
        ]
        .into(),
    )]
    .into();
    c.set_group_configs(std::sync::Arc::new(configs));
    let mut a = Client::join(&mut c, "a", 0);
    let mut b = Client::join(&mut c, "b", 0);
    assert_eq!(a.beat(&mut c, 1).heartbeat_interval_ms, 6000);
    b.beat(&mut c, 2);
    // b is silent: past the broker's 45 s, inside the group's 50 s, it is still a member.
    a.beat(&mut c, 40_000);
    c.tick(47_000);
    assert_eq!(b.beat(&mut c, 47_001).error, NONE);
    a.beat(&mut c, 80_000);
    c.tick(98_000);
    assert_eq!(b.beat(&mut c, 98_001).error, UNKNOWN_MEMBER_ID);
    // Without its configs the group is back on the broker's interval.
    c.set_group_configs(Default::default());
    assert_eq!(a.beat(&mut c, 98_002).heartbeat_interval_ms, 5000);
}

#[test]
fn a_member_that_never_revokes_is_removed_after_its_rebalance_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let mut a = Client::join(&mut c, "a", 0);
    let mut b = Client::join(&mut c, "b", 0);
    // a is told to revoke but keeps reporting all four partitions.
    for t in [1, 10_000, 20_000, 29_000] {
        let mut req = hb("a", 1, None);
        req.owned = Some(parts(&[0, 1, 2, 3]));
        assert_eq!(c.consumer_heartbeat(&req, &topics(4), t).0.error, NONE);
        b.beat(&mut c, t);
    }
    assert_eq!(b.owned(), Vec::<i32>::new());
    c.tick(31_000);
    b.beat(&mut c, 31_001);
    assert_eq!(b.owned(), vec![0, 1, 2, 3]);
    assert_eq!(a.beat(&mut c, 31_002).error, UNKNOWN_MEMBER_ID);
}

#[test]
fn static_member_leaves_temporarily_and_its_successor_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let join = |id: &str| CgHeartbeat {
        instance_id: Some("i1".into()),
        ..hb(id, 0, Some(&[]))
    };
    let r = c.consumer_heartbeat(&join("a"), &topics(4), 0).0;
    assert_eq!(r.assignment, Some(parts(&[0, 1, 2, 3])));
    // Same instance id while a is still active.
    let r = c.consumer_heartbeat(&join("a2"), &topics(4), 1).0;
    assert_eq!(r.error, UNRELEASED_INSTANCE_ID);
    let leave = CgHeartbeat {
        instance_id: Some("i1".into()),
        ..hb("a", STATIC_LEAVE_EPOCH, None)
    };
    assert_eq!(c.consumer_heartbeat(&leave, &topics(4), 2).0.error, NONE);
    let r = c.consumer_heartbeat(&join("a2"), &topics(4), 3).0;
    assert_eq!(r.error, NONE);
    assert_eq!(r.member_epoch, 1);
    assert_eq!(r.assignment, Some(parts(&[0, 1, 2, 3])));
    let (g, _, _) = c.consumer_describe("g").unwrap();
    assert_eq!(g.members.keys().collect::<Vec<_>>(), vec!["a2"]);
}

#[test]
fn offset_commits_need_the_current_member_epoch_and_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let mut a = Client::join(&mut c, "a", 0);
    let _b = Client::join(&mut c, "b", 0);
    a.beat(&mut c, 1);
    a.beat(&mut c, 2);
    let ctx = |epoch| CommitContext {
        group_id: "g".into(),
        member_id: "a".into(),
        group_instance_id: None,
        generation_id: epoch,
        api_version: 9,
    };
    let o = OffsetToCommit {
        topic: "t".into(),
        partition: a.owned()[0],
        offset: 42,
        leader_epoch: 0,
        metadata: None,
    };
    assert_eq!(
        c.commit_offsets(&ctx(1), std::slice::from_ref(&o), 3),
        Err(STALE_MEMBER_EPOCH)
    );
    assert_eq!(
        c.commit_offsets(&ctx(2), std::slice::from_ref(&o), 3),
        Ok(vec![NONE])
    );
    let admin = CommitContext {
        member_id: String::new(),
        ..ctx(-1)
    };
    assert_eq!(
        c.commit_offsets(&admin, std::slice::from_ref(&o), 3),
        Err(UNKNOWN_MEMBER_ID)
    );
    c.flush().unwrap();
    drop(c);
    let mut c = open(dir.path(), 100);
    let fetched = c.fetch_offsets("g", None, false);
    assert_eq!(fetched[0].offset, 42);
    let (g, state, assignor) = c.consumer_describe("g").unwrap();
    assert_eq!((state, assignor), ("Reconciling", "uniform"));
    assert_eq!(g.members["a"].epoch, 2);
    // The member carries on with its epoch after the restart.
    a.beat(&mut c, 200);
    assert_eq!(a.epoch, 2);
    let listed = c.list_groups(&[], &["consumer".to_string()]);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].group_type, "consumer");
    assert!(c.list_groups(&[], &["classic".to_string()]).is_empty());
    assert_eq!(c.delete_groups(&["g".to_string()]), vec![NON_EMPTY_GROUP]);
}

#[test]
fn empty_classic_group_upgrades_and_empty_consumer_group_downgrades() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let simple = CommitContext {
        group_id: "g".into(),
        member_id: String::new(),
        group_instance_id: None,
        generation_id: -1,
        api_version: 9,
    };
    let o = OffsetToCommit {
        topic: "t".into(),
        partition: 0,
        offset: 7,
        leader_epoch: 0,
        metadata: None,
    };
    c.commit_offsets(&simple, &[o], 0).unwrap();
    assert_eq!(c.group_type("g"), Some("classic"));
    let a = Client::join(&mut c, "a", 1);
    assert_eq!(a.owned(), vec![0, 1, 2, 3]);
    assert_eq!(c.group_type("g"), Some("consumer"));
    assert_eq!(c.fetch_offsets("g", None, false)[0].offset, 7);
    // A classic member joins a consumer group with a consumer-protocol subscription; one
    // without (unreadable metadata) fails as on Kafka, with an unknown server error.
    let join = JoinRequest {
        group_id: "g".into(),
        client_id: "x".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::new())],
        ..Default::default()
    };
    let r = c.join(1, join.clone(), 2);
    assert!(matches!(&r[..], [Reply::Join(1, j)] if j.error == UNKNOWN_SERVER_ERROR));
    c.consumer_heartbeat(&hb("a", LEAVE_EPOCH, None), &topics(4), 3);
    assert_eq!(c.consumer_describe("g").unwrap().1, "Empty");
    let r = c.join(2, join, 4);
    assert!(r.is_empty() || matches!(&r[..], [Reply::Join(2, j)] if j.error == NONE));
    assert_eq!(c.group_type("g"), Some("classic"));
    assert_eq!(c.consumer_describe("g").unwrap_err(), GROUP_ID_NOT_FOUND);
    assert_eq!(c.fetch_offsets("g", None, false)[0].offset, 7);
}

#[test]
fn range_assignor_gives_contiguous_ranges() {
    let subs: BTreeMap<String, BTreeSet<(Uuid, i32)>> = ["a", "b", "c"]
        .iter()
        .map(|m| (m.to_string(), [(T, 7)].into_iter().collect()))
        .collect();
    let out = range_assign(&subs);
    let get = |m: &str| out[m][&T].iter().copied().collect::<Vec<_>>();
    assert_eq!(get("a"), vec![0, 1, 2]);
    assert_eq!(get("b"), vec![3, 4]);
    assert_eq!(get("c"), vec![5, 6]);
}

#[test]
fn uniform_assignor_is_balanced_and_sticky() {
    let subs = |ms: &[&str]| -> BTreeMap<String, BTreeSet<(Uuid, i32)>> {
        ms.iter()
            .map(|m| (m.to_string(), [(T, 10)].into_iter().collect()))
            .collect()
    };
    let first = uniform_assign(&subs(&["a", "b"]), &BTreeMap::new());
    let second = uniform_assign(&subs(&["a", "b", "c"]), &first);
    let n = |o: &BTreeMap<String, Parts>, m: &str| count(&o[m]);
    assert_eq!((n(&first, "a"), n(&first, "b")), (5, 5));
    let counts: Vec<usize> = ["a", "b", "c"].iter().map(|m| n(&second, m)).collect();
    assert_eq!(counts.iter().sum::<usize>(), 10);
    assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
    // Sticky: a and b only lost partitions, never swapped.
    for m in ["a", "b"] {
        assert!(second[m][&T].is_subset(&first[m][&T]));
    }
}

#[test]
fn added_partitions_and_regex_subscriptions_reach_the_assignment() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let u = Uuid::from_u128(0x99);
    let mut view = topics(2);
    view.insert("other".into(), (u, 1));
    let mut join = hb("a", 0, Some(&[]));
    join.subscribed_topic_names = Some(vec![]);
    join.subscribed_topic_regex = Some("t|oth.*".into());
    let r = c.consumer_heartbeat(&join, &view, 0).0;
    assert_eq!(r.error, NONE, "{r:?}");
    let a = r.assignment.unwrap();
    assert_eq!(count(&a), 3);
    assert!(a.contains_key(&u));
    // Partitions added to t: the group epoch moves and the member gets them.
    view.insert("t".into(), (T, 4));
    let mut req = hb("a", r.member_epoch, None);
    req.owned = Some(a);
    let r2 = c.consumer_heartbeat(&req, &view, 1).0;
    assert_eq!(r2.member_epoch, r.member_epoch + 1);
    assert_eq!(count(&r2.assignment.unwrap()), 5);
    // A malformed regex is refused.
    let mut bad = hb("b", 0, Some(&[]));
    bad.subscribed_topic_regex = Some("(".into());
    assert_eq!(
        c.consumer_heartbeat(&bad, &view, 2).0.error,
        INVALID_REGULAR_EXPRESSION
    );
}

#[test]
fn a_plain_heartbeat_writes_nothing_and_a_join_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let mut a = Client::join(&mut c, "a", 0);
    let n = c.appends();
    assert!(n >= 1);
    for t in 1..5 {
        a.beat(&mut c, t * 1000);
    }
    assert_eq!(c.appends(), n, "steady heartbeats appended records");
    Client::join(&mut c, "b", 6000);
    assert!(c.appends() > n);
}

/// The group's state without the timers a restart re-arms.
fn persisted(c: &GroupCoordinator) -> ConsumerGroup {
    let (mut g, _, _) = c.consumer_describe("g").unwrap();
    for m in g.members.values_mut() {
        m.session_deadline = 0;
        m.revoke_deadline = None;
    }
    g
}

#[test]
fn a_consumer_group_written_as_kafka_records_comes_back_whole_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let mut a = Client::join(&mut c, "a", 0);
    let mut b = Client::join(&mut c, "b", 1);
    let _x = Client::join(&mut c, "x", 2);
    a.beat(&mut c, 3);
    b.beat(&mut c, 4);
    // x leaves: its subscription, target and assignment records become tombstones.
    let mut leave = hb("x", LEAVE_EPOCH, None);
    leave.subscribed_topic_names = None;
    c.consumer_heartbeat(&leave, &topics(4), 5);
    a.beat(&mut c, 6);
    c.flush().unwrap();
    let before = persisted(&c);
    assert!(!before.members.contains_key("x"));
    drop(c);
    let c = open(dir.path(), 100);
    assert_eq!(persisted(&c), before);
}
