//! Kafka 4.1's online migration through the coordinator: a ConsumerGroupHeartbeat upgrades a
//! Stable classic group, its members stay as classic members and are moved by the server-side
//! assignor through JoinGroup / SyncGroup / Heartbeat, and the group turns classic again when
//! the last consumer-protocol member leaves. Every partition is held by one member at a time.

use super::codes::*;
use super::consumer::*;
use super::embedded::{self, Subscription};
use super::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use uuid::Uuid;

const T: Uuid = Uuid::from_u128(0x77);
const SESSION: i32 = 10_000;
const REBALANCE: i32 = 20_000;

fn topics() -> TopicView {
    [("t".to_string(), (T, 4))].into_iter().collect()
}

fn open(dir: &Path, cfg: GroupConfig, now: i64) -> GroupCoordinator {
    let mut c = GroupCoordinator::open(dir, cfg, now).unwrap();
    c.set_topics(Arc::new(topics()));
    c
}

fn metadata(owned: &[i32]) -> Bytes {
    let mut owned_parts = embedded::NamedParts::new();
    if !owned.is_empty() {
        owned_parts.insert("t".into(), owned.iter().copied().collect());
    }
    embedded::write_subscription(&Subscription {
        version: 1,
        topics: vec!["t".into()],
        owned: owned_parts,
        rack_id: None,
    })
    .into()
}

fn join_req(member: &str, owned: &[i32]) -> JoinRequest {
    JoinRequest {
        group_id: "g".into(),
        member_id: member.into(),
        group_instance_id: None,
        client_id: "rdkafka".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: SESSION,
        rebalance_timeout_ms: REBALANCE,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), metadata(owned))],
        require_known_member_id: true,
    }
}

fn sync_req(member: &str, generation: i32, assignments: Vec<(String, Bytes)>) -> SyncRequest {
    SyncRequest {
        group_id: "g".into(),
        member_id: member.into(),
        group_instance_id: None,
        generation_id: generation,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments,
    }
}

fn join_of(replies: &[Reply], token: Token) -> JoinResponse {
    replies
        .iter()
        .find_map(|r| match r {
            Reply::Join(t, j) if *t == token => Some(j.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no join reply for {token} in {replies:?}"))
}

fn sync_of(replies: &[Reply], token: Token) -> SyncResponse {
    replies
        .iter()
        .find_map(|r| match r {
            Reply::Sync(t, s) if *t == token => Some(s.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no sync reply for {token} in {replies:?}"))
}

fn assigned(sync: &SyncResponse) -> Vec<i32> {
    let a = embedded::read_assignment(&sync.assignment).expect("assignment");
    a.partitions
        .get("t")
        .map(|s| s.iter().copied().collect())
        .unwrap_or_default()
}

fn assignment_bytes(ps: &[i32]) -> Bytes {
    let parts = [("t".to_string(), ps.iter().copied().collect::<BTreeSet<_>>())]
        .into_iter()
        .collect();
    embedded::write_assignment(&parts, 1).into()
}

/// A classic member as an eager client behaves: revokes everything before it rejoins.
struct Classic {
    id: String,
    generation: i32,
    owned: Vec<i32>,
}

impl Classic {
    fn rejoin(&mut self, c: &mut GroupCoordinator, token: Token, now: i64) {
        self.owned.clear();
        let r = c.join(token, join_req(&self.id, &[]), now);
        let j = join_of(&r, token);
        assert_eq!(j.error, NONE, "{j:?}");
        assert_eq!(
            j.leader, "",
            "classic members of a consumer group are followers"
        );
        assert!(j.members.is_empty());
        assert_eq!(j.protocol_name.as_deref(), Some("range"));
        self.generation = j.generation_id;
        let r = c.sync(token + 1, sync_req(&self.id, self.generation, vec![]), now);
        let s = sync_of(&r, token + 1);
        assert_eq!(s.error, NONE, "{s:?}");
        self.owned = assigned(&s);
    }

    fn heartbeat(&self, c: &mut GroupCoordinator, now: i64) -> i16 {
        c.heartbeat("g", &self.id, None, self.generation, now)
    }
}

/// A Stable classic group: members a (leader, partitions 0 and 1) and b (2 and 3), generation 1.
fn classic_group(c: &mut GroupCoordinator, now: i64) -> (Classic, Classic) {
    let mut ids = Vec::new();
    for (i, token) in [(0, 1), (1, 3)] {
        let r = c.join(token, join_req("", &[]), now + i);
        let j = join_of(&r, token);
        assert_eq!(j.error, MEMBER_ID_REQUIRED);
        let r = c.join(token + 1, join_req(&j.member_id, &[]), now + i);
        assert!(r.is_empty(), "parked: {r:?}");
        ids.push(j.member_id);
    }
    // The initial delay (0 here) is extended once for the second member.
    let mut r = c.tick(now + 10);
    r.extend(c.tick(now + 11));
    let (ja, jb) = (join_of(&r, 2), join_of(&r, 4));
    assert_eq!((ja.generation_id, jb.generation_id), (1, 1));
    let (a, b) = if ja.leader == ids[0] {
        (ids[0].clone(), ids[1].clone())
    } else {
        (ids[1].clone(), ids[0].clone())
    };
    let plan = vec![
        (a.clone(), assignment_bytes(&[0, 1])),
        (b.clone(), assignment_bytes(&[2, 3])),
    ];
    let r = c.sync(5, sync_req(&a, 1, plan), now + 20);
    assert_eq!(assigned(&sync_of(&r, 5)), vec![0, 1]);
    let r = c.sync(6, sync_req(&b, 1, vec![]), now + 21);
    assert_eq!(assigned(&sync_of(&r, 6)), vec![2, 3]);
    assert_eq!(c.group_state("g"), Some(GroupState::Stable));
    let member = |id: String, owned| Classic {
        id,
        generation: 1,
        owned,
    };
    (member(a, vec![0, 1]), member(b, vec![2, 3]))
}

fn cg_join(c: &mut GroupCoordinator, id: &str, now: i64) -> (CgHeartbeatResponse, Vec<Reply>) {
    let req = CgHeartbeat {
        group_id: "g".into(),
        member_id: id.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Parts::new()),
        client_id: "java".into(),
        client_host: "/127.0.0.1".into(),
        api_version: 1,
        ..Default::default()
    };
    c.consumer_heartbeat(&req, &topics(), now)
}

fn cg_beat(
    c: &mut GroupCoordinator,
    id: &str,
    epoch: i32,
    owned: &Parts,
    now: i64,
) -> CgHeartbeatResponse {
    let req = CgHeartbeat {
        group_id: "g".into(),
        member_id: id.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned: Some(owned.clone()),
        api_version: 1,
        ..Default::default()
    };
    c.consumer_heartbeat(&req, &topics(), now).0
}

fn of_t(p: &Parts) -> Vec<i32> {
    p.get(&T)
        .map(|s| s.iter().copied().collect())
        .unwrap_or_default()
}

#[test]
fn a_consumer_member_joins_a_classic_group_and_partitions_split_without_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), GroupConfig::default(), 0);
    let (mut a, mut b) = classic_group(&mut c, 0);
    // The upgrade: the classic members keep their partitions at epoch = generation.
    let (r, replies) = cg_join(&mut c, "java", 100);
    assert_eq!(r.error, NONE, "{r:?}");
    assert!(replies.is_empty());
    assert_eq!(c.group_type("g"), Some("consumer"));
    let (g, _, _) = c.consumer_describe("g").unwrap();
    assert_eq!(g.epoch, 2, "generation 1, then the joining member");
    assert_eq!(of_t(&g.members[&a.id].assigned), vec![0, 1]);
    assert_eq!(g.members[&a.id].epoch, 1);
    assert!(g.members[&a.id].classic.is_some());
    assert!(g.members["java"].classic.is_none());
    // The joining member waits: every partition is still held by a classic member.
    assert_eq!(of_t(r.assignment.as_ref().unwrap()), Vec::<i32>::new());
    let mut java_epoch = r.member_epoch;
    let mut java_owned = Parts::new();
    // The classic members learn of the rebalance on their heartbeat and rejoin.
    assert_eq!(a.heartbeat(&mut c, 200), REBALANCE_IN_PROGRESS);
    assert_eq!(b.heartbeat(&mut c, 200), REBALANCE_IN_PROGRESS);
    a.rejoin(&mut c, 10, 300);
    b.rejoin(&mut c, 20, 300);
    assert_eq!(a.generation, 2);
    for now in [400, 500, 600] {
        let r = cg_beat(&mut c, "java", java_epoch, &java_owned, now);
        assert_eq!(r.error, NONE, "{r:?}");
        java_epoch = r.member_epoch;
        if let Some(p) = r.assignment {
            java_owned = p;
        }
        for m in [&mut a, &mut b] {
            match m.heartbeat(&mut c, now) {
                NONE => {}
                REBALANCE_IN_PROGRESS => m.rejoin(&mut c, now as u64, now),
                e => panic!("heartbeat error {e}"),
            }
        }
    }
    let mut all: Vec<i32> = a.owned.clone();
    all.extend(&b.owned);
    all.extend(of_t(&java_owned));
    all.sort();
    assert_eq!(
        all,
        vec![0, 1, 2, 3],
        "each partition once: a {:?} b {:?} java {:?}",
        a.owned,
        b.owned,
        of_t(&java_owned)
    );
    assert!(!a.owned.is_empty() && !b.owned.is_empty() && !of_t(&java_owned).is_empty());
    assert_eq!(c.consumer_describe("g").unwrap().1, "Stable");
    // A classic member commits with its generation (the member epoch), any version.
    let commit = |generation| CommitContext {
        group_id: "g".into(),
        member_id: a.id.clone(),
        group_instance_id: None,
        generation_id: generation,
        api_version: 7,
    };
    let o = OffsetToCommit {
        topic: "t".into(),
        partition: a.owned[0],
        offset: 5,
        leader_epoch: 0,
        metadata: None,
    };
    assert_eq!(
        c.commit_offsets(&commit(a.generation), std::slice::from_ref(&o), 700),
        Ok(vec![NONE])
    );
    assert_eq!(
        c.commit_offsets(&commit(a.generation - 1), &[o], 700),
        Err(ILLEGAL_GENERATION)
    );
    // A classic member comes back after a restart, still a classic member.
    c.flush().unwrap();
    drop(c);
    let mut c = open(dir.path(), GroupConfig::default(), 1_000);
    let (g, _, _) = c.consumer_describe("g").unwrap();
    let meta = g.members[&a.id]
        .classic
        .clone()
        .expect("classic after restart");
    assert_eq!(meta.session_timeout_ms, SESSION);
    assert_eq!(meta.protocols[0].0, "range");
    assert_eq!(a.heartbeat(&mut c, 1_100), NONE);
    assert_eq!(c.fetch_offsets("g", None, false)[0].offset, 5);
}

#[test]
fn the_last_consumer_member_leaving_turns_the_group_classic_and_it_rebalances() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), GroupConfig::default(), 0);
    let (mut a, mut b) = classic_group(&mut c, 0);
    let (r, _) = cg_join(&mut c, "java", 100);
    a.rejoin(&mut c, 10, 200);
    b.rejoin(&mut c, 20, 200);
    let left = cg_beat(&mut c, "java", -1, &Parts::new(), 300);
    assert_eq!(left.error, NONE);
    let _ = r;
    assert_eq!(c.group_type("g"), Some("classic"));
    assert_eq!(c.group_state("g"), Some(GroupState::PreparingRebalance));
    let generation = c.generation("g").unwrap();
    // Kafka converts instead of fencing: the generation is the epoch before the leave, the
    // one the classic members hold, so their heartbeat is told to rejoin, not fenced.
    assert_eq!(generation, 2, "the consumer group's epoch before the leave");
    assert_eq!((a.generation, b.generation), (generation, generation));
    assert_eq!(
        c.heartbeat("g", &a.id, None, a.generation, 310),
        REBALANCE_IN_PROGRESS
    );
    let r = c.join(30, join_req(&a.id, &[]), 320);
    assert!(r.is_empty());
    let r = c.join(31, join_req(&b.id, &[]), 330);
    let (ja, jb) = (join_of(&r, 30), join_of(&r, 31));
    assert_eq!((ja.error, jb.error), (NONE, NONE));
    assert_eq!(ja.generation_id, 3);
    let (leader, follower) = if ja.leader == a.id {
        (&a, &b)
    } else {
        (&b, &a)
    };
    assert_eq!(
        [&ja, &jb]
            .iter()
            .find(|j| j.member_id == leader.id)
            .unwrap()
            .members
            .len(),
        2
    );
    let plan = vec![
        (leader.id.clone(), assignment_bytes(&[0, 1])),
        (follower.id.clone(), assignment_bytes(&[2, 3])),
    ];
    let r = c.sync(32, sync_req(&leader.id, 3, plan), 340);
    assert_eq!(sync_of(&r, 32).error, NONE);
    let r = c.sync(33, sync_req(&follower.id, 3, vec![]), 341);
    assert_eq!(assigned(&sync_of(&r, 33)), vec![2, 3]);
    assert_eq!(c.group_state("g"), Some(GroupState::Stable));
    // And a consumer member can upgrade it again.
    assert_eq!(cg_join(&mut c, "java2", 400).0.error, NONE);
    assert_eq!(c.group_type("g"), Some("consumer"));
}

#[test]
fn upgrade_refusals_answer_group_id_not_found_with_kafkas_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = GroupConfig {
        migration_policy: MigrationPolicy::Downgrade,
        ..GroupConfig::default()
    };
    let mut c = open(dir.path(), cfg, 0);
    classic_group(&mut c, 0);
    let (r, _) = cg_join(&mut c, "java", 100);
    assert_eq!(r.error, GROUP_ID_NOT_FOUND);
    assert_eq!(
        r.message.as_deref(),
        Some(
            "Cannot upgrade classic group g to consumer group because online upgrade is disabled."
        )
    );
    assert_eq!(c.group_type("g"), Some("classic"));
    // Not a member's first heartbeat: not a consumer group.
    let r = cg_beat(&mut c, "java", 3, &Parts::new(), 110);
    assert_eq!(r.error, GROUP_ID_NOT_FOUND);

    // Custom assignors keep state in the assignment's user data: no upgrade.
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), GroupConfig::default(), 0);
    let (a, b) = classic_group(&mut c, 0);
    let mut with_data = assignment_bytes(&[0, 1]).to_vec();
    with_data.truncate(with_data.len() - 4);
    with_data.extend_from_slice(&[0, 0, 0, 1, 7]);
    c.join(50, join_req(&a.id, &[]), 100);
    let r = c.join(51, join_req(&b.id, &[]), 101);
    assert_eq!(join_of(&r, 50).generation_id, 2);
    c.sync(
        52,
        sync_req(&a.id, 2, vec![(a.id.clone(), with_data.into())]),
        102,
    );
    let (r, _) = cg_join(&mut c, "java", 200);
    assert_eq!(r.error, GROUP_ID_NOT_FOUND);
    assert!(r.message.unwrap().contains("unsupported custom assignor"));
}

#[test]
fn parked_classic_joins_are_answered_rebalance_in_progress_by_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), GroupConfig::default(), 0);
    let (a, _b) = classic_group(&mut c, 0);
    // a rejoins (a rebalance begins, b has not rejoined yet): parked.
    assert!(c.join(40, join_req(&a.id, &[]), 100).is_empty());
    let (r, replies) = cg_join(&mut c, "java", 110);
    assert_eq!(r.error, NONE);
    assert_eq!(join_of(&replies, 40).error, REBALANCE_IN_PROGRESS);
}

#[test]
fn classic_member_checks_in_a_consumer_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), GroupConfig::default(), 0);
    let (a, _b) = classic_group(&mut c, 0);
    cg_join(&mut c, "java", 100);
    // Wrong generation, unknown member, a consumer member on the classic API.
    assert_eq!(c.heartbeat("g", &a.id, None, 7, 110), ILLEGAL_GENERATION);
    assert_eq!(c.heartbeat("g", "nobody", None, 1, 110), UNKNOWN_MEMBER_ID);
    assert_eq!(c.heartbeat("g", "java", None, 2, 110), UNKNOWN_MEMBER_ID);
    let r = c.sync(60, sync_req(&a.id, 7, vec![]), 120);
    assert_eq!(sync_of(&r, 60).error, ILLEGAL_GENERATION);
    // At its generation but behind the group epoch: rejoin first.
    let r = c.sync(61, sync_req(&a.id, 1, vec![]), 120);
    assert_eq!(sync_of(&r, 61).error, REBALANCE_IN_PROGRESS);
    // Another protocol type, or a protocol no classic member supports.
    let mut other = join_req("", &[]);
    other.protocols = vec![("roundrobin".into(), metadata(&[]))];
    let r = c.join(62, other, 130);
    assert_eq!(join_of(&r, 62).error, INCONSISTENT_GROUP_PROTOCOL);
    // A new member first gets its id (JoinGroup v4+).
    let r = c.join(63, join_req("", &[]), 130);
    let j = join_of(&r, 63);
    assert_eq!(j.error, MEMBER_ID_REQUIRED);
    assert!(!j.member_id.is_empty());
    // A classic member told to rejoin that keeps heartbeating but never rejoins is fenced
    // once its rebalance timeout (armed by the first REBALANCE_IN_PROGRESS) is over.
    for now in [140, 5_000, 10_000, 15_000, 20_000] {
        assert_eq!(a.heartbeat(&mut c, now), REBALANCE_IN_PROGRESS);
        cg_beat(&mut c, "java", 2, &Parts::new(), now);
        c.tick(now);
    }
    assert!(c
        .consumer_describe("g")
        .unwrap()
        .0
        .members
        .contains_key(&a.id));
    c.tick(140 + REBALANCE as i64 + 1);
    let (g, _, _) = c.consumer_describe("g").unwrap();
    assert!(!g.members.contains_key(&a.id));
    assert!(g.members.contains_key("java"));
}
