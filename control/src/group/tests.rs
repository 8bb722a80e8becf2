use super::codes::*;
use super::*;
use std::path::Path;

const SESSION: i32 = 10_000;
const REBALANCE: i32 = 30_000;

fn cfg() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: 3_000,
        ..GroupConfig::default()
    }
}

fn open(dir: &Path, now: i64) -> GroupCoordinator {
    GroupCoordinator::open(dir, cfg(), now).unwrap()
}

/// ConsumerProtocolSubscription v0 for `topics`.
fn subscription(topics: &[&str]) -> Bytes {
    let mut b = vec![0u8, 0];
    b.extend_from_slice(&(topics.len() as i32).to_be_bytes());
    for t in topics {
        b.extend_from_slice(&(t.len() as i16).to_be_bytes());
        b.extend_from_slice(t.as_bytes());
    }
    b.into()
}

fn join_req(group: &str, member: &str, client: &str) -> JoinRequest {
    JoinRequest {
        group_id: group.into(),
        member_id: member.into(),
        group_instance_id: None,
        client_id: client.into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: SESSION,
        rebalance_timeout_ms: REBALANCE,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), subscription(&["t"]))],
        require_known_member_id: true,
    }
}

fn join_reply(replies: &[Reply], token: Token) -> Option<JoinResponse> {
    replies.iter().find_map(|r| match r {
        Reply::Join(t, j) if *t == token => Some(j.clone()),
        _ => None,
    })
}

fn sync_reply(replies: &[Reply], token: Token) -> Option<SyncResponse> {
    replies.iter().find_map(|r| match r {
        Reply::Sync(t, s) if *t == token => Some(s.clone()),
        _ => None,
    })
}

/// Gets a member id via the MEMBER_ID_REQUIRED round trip and parks the real join.
fn first_join(
    c: &mut GroupCoordinator,
    group: &str,
    client: &str,
    token: Token,
    now: i64,
) -> String {
    let r = c.join(token, join_req(group, "", client), now);
    let j = join_reply(&r, token).expect("immediate answer");
    assert_eq!(j.error, MEMBER_ID_REQUIRED);
    assert!(j.member_id.starts_with(client));
    let r = c.join(token + 1, join_req(group, &j.member_id, client), now);
    assert!(
        join_reply(&r, token + 1).is_none(),
        "join is parked during the initial delay"
    );
    j.member_id
}

fn sync(
    c: &mut GroupCoordinator,
    token: Token,
    group: &str,
    member: &str,
    generation: i32,
    assignments: Vec<(String, Bytes)>,
    now: i64,
) -> Vec<Reply> {
    c.sync(
        token,
        SyncRequest {
            group_id: group.into(),
            member_id: member.into(),
            group_instance_id: None,
            generation_id: generation,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments,
        },
        now,
    )
}

/// Two members form generation 1 with assignments "A" and "B". Returns (leader, follower).
fn stable_pair(c: &mut GroupCoordinator, now: i64) -> (String, String) {
    let a = first_join(c, "g", "ca", 10, now);
    let b = first_join(c, "g", "cb", 20, now + 100);
    assert!(
        c.tick(now + 2_000).is_empty(),
        "still inside the initial delay"
    );
    // b arrived during the delay, so the delay is extended once more (Kafka behaviour).
    assert!(
        c.tick(now + 3_200).is_empty(),
        "initial delay extended by a new member"
    );
    let r = c.tick(now + 6_300);
    let ja = join_reply(&r, 11).expect("member a answered");
    let jb = join_reply(&r, 21).expect("member b answered");
    assert_eq!((ja.error, jb.error), (NONE, NONE));
    assert_eq!(ja.generation_id, 1);
    assert_eq!(jb.generation_id, 1);
    assert_eq!(ja.leader, a);
    assert_eq!(ja.members.len(), 2, "leader sees every member");
    assert!(jb.members.is_empty(), "followers see no member list");
    assert_eq!(ja.protocol_name.as_deref(), Some("range"));
    // Follower syncs first: parked until the leader's assignment arrives.
    let r = sync(c, 30, "g", &b, 1, vec![], now + 6_400);
    assert!(r.is_empty());
    let r = sync(
        c,
        31,
        "g",
        &a,
        1,
        vec![
            (a.clone(), Bytes::from_static(b"A")),
            (b.clone(), Bytes::from_static(b"B")),
        ],
        now + 6_500,
    );
    assert_eq!(
        sync_reply(&r, 31).unwrap().assignment,
        Bytes::from_static(b"A")
    );
    assert_eq!(
        sync_reply(&r, 30).unwrap().assignment,
        Bytes::from_static(b"B")
    );
    assert_eq!(c.group_state("g"), Some(GroupState::Stable));
    (a, b)
}

#[test]
fn two_members_join_sync_and_receive_the_leaders_assignment() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let (a, b) = stable_pair(&mut c, 0);
    assert_eq!(c.heartbeat("g", &a, None, 1, 7_000), NONE);
    assert_eq!(c.heartbeat("g", &b, None, 1, 7_000), NONE);
    let d = c.describe("g").unwrap();
    assert_eq!(d.state, GroupState::Stable);
    assert_eq!(d.members.len(), 2);
    assert_eq!(
        c.list_groups(&[], &[]),
        vec![GroupListing {
            group_id: "g".into(),
            protocol_type: "consumer".into(),
            state: GroupState::Stable,
            group_type: "classic",
            state_name: "Stable",
        }]
    );
}

#[test]
fn new_member_midway_triggers_rebalance_and_bumps_generation() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let (a, b) = stable_pair(&mut c, 0);
    // A third consumer arrives.
    let r = c.join(40, join_req("g", "", "cc"), 8_000);
    let cid = join_reply(&r, 40).unwrap().member_id;
    let r = c.join(41, join_req("g", &cid, "cc"), 8_000);
    assert!(r.is_empty());
    assert_eq!(c.group_state("g"), Some(GroupState::PreparingRebalance));
    // Existing members learn about it through their heartbeat.
    assert_eq!(c.heartbeat("g", &a, None, 1, 8_100), REBALANCE_IN_PROGRESS);
    assert_eq!(c.heartbeat("g", &b, None, 1, 8_100), REBALANCE_IN_PROGRESS);
    // Offsets from the old generation are refused while it rebalances.
    let ctx = CommitContext {
        group_id: "g".into(),
        member_id: a.clone(),
        generation_id: 1,
        api_version: 9,
        ..Default::default()
    };
    let off = [OffsetToCommit {
        topic: "t".into(),
        partition: 0,
        offset: 5,
        leader_epoch: -1,
        metadata: None,
    }];
    // PreparingRebalance still accepts the current generation (Kafka does too).
    assert_eq!(c.commit_offsets(&ctx, &off, 8_150), Ok(vec![NONE]));
    let r = c.join(42, join_req("g", &a, "ca"), 8_200);
    assert!(r.is_empty());
    let r = c.join(43, join_req("g", &b, "cb"), 8_300);
    // Everyone rejoined: the barrier opens without waiting for the rebalance timeout.
    let ja = join_reply(&r, 42).unwrap();
    let jb = join_reply(&r, 43).unwrap();
    let jc = join_reply(&r, 41).unwrap();
    assert_eq!(ja.generation_id, 2);
    assert_eq!(jb.generation_id, 2);
    assert_eq!(jc.generation_id, 2);
    assert_eq!(ja.members.len(), 3);
    assert_eq!(c.commit_offsets(&ctx, &off, 8_400), Err(ILLEGAL_GENERATION));
    assert_eq!(c.heartbeat("g", &b, None, 1, 8_400), ILLEGAL_GENERATION);
    assert_eq!(c.heartbeat("g", &b, None, 2, 8_400), NONE);
}

#[test]
fn member_that_stops_heartbeating_is_expired_after_session_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let (a, b) = stable_pair(&mut c, 0);
    // a keeps heartbeating, b goes silent.
    for t in (7_000..16_000).step_by(2_000) {
        assert_eq!(c.heartbeat("g", &a, None, 1, t), NONE);
        c.tick(t);
    }
    assert_eq!(c.group_state("g"), Some(GroupState::Stable));
    assert_eq!(c.heartbeat("g", &a, None, 1, 16_000), NONE);
    c.tick(16_600); // b's session (last refresh at 6_500 + 10_000) is over
    assert_eq!(c.group_state("g"), Some(GroupState::PreparingRebalance));
    assert_eq!(c.heartbeat("g", &b, None, 1, 16_700), UNKNOWN_MEMBER_ID);
    assert_eq!(c.heartbeat("g", &a, None, 1, 16_700), REBALANCE_IN_PROGRESS);
    let r = c.join(50, join_req("g", &a, "ca"), 16_800);
    let j = join_reply(&r, 50).expect("sole remaining member completes the join");
    assert_eq!(j.generation_id, 2);
    assert_eq!(j.leader, a);
    assert_eq!(j.members.len(), 1);
}

#[test]
fn member_not_rejoining_within_rebalance_timeout_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let (a, b) = stable_pair(&mut c, 0);
    // a rejoins (leader rejoin forces a rebalance); b keeps heartbeating but never rejoins.
    assert!(c.join(60, join_req("g", &a, "ca"), 7_000).is_empty());
    for t in (5_000..37_000).step_by(3_000) {
        assert_eq!(c.heartbeat("g", &b, None, 1, t), REBALANCE_IN_PROGRESS);
        assert!(c.tick(t).is_empty());
    }
    let r = c.tick(37_001);
    let j = join_reply(&r, 60).expect("rebalance timeout completes the join");
    assert_eq!(j.generation_id, 2);
    assert_eq!(j.members.len(), 1);
    assert_eq!(c.heartbeat("g", &b, None, 2, 37_100), UNKNOWN_MEMBER_ID);
}

#[test]
fn member_that_never_syncs_is_removed_after_rebalance_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let a = first_join(&mut c, "g", "ca", 10, 0);
    let _b = first_join(&mut c, "g", "cb", 20, 0);
    assert!(c.tick(3_000).is_empty());
    c.tick(6_000);
    let r = sync(
        &mut c,
        30,
        "g",
        &a,
        1,
        vec![(a.clone(), Bytes::from_static(b"A"))],
        6_100,
    );
    assert_eq!(sync_reply(&r, 30).unwrap().error, NONE);
    assert_eq!(c.heartbeat("g", &a, None, 1, 20_000), NONE);
    assert_eq!(c.heartbeat("g", &a, None, 1, 30_000), NONE);
    c.tick(36_001);
    assert_eq!(c.group_state("g"), Some(GroupState::PreparingRebalance));
    assert_eq!(c.describe("g").unwrap().members.len(), 1);
}

#[test]
fn unknown_member_and_wrong_generation_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let (a, _) = stable_pair(&mut c, 0);
    assert_eq!(
        c.heartbeat("g", "nobody", None, 1, 7_000),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        c.heartbeat("nogroup", &a, None, 1, 7_000),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(c.heartbeat("g", &a, None, 7, 7_000), ILLEGAL_GENERATION);
    let r = sync(&mut c, 70, "g", &a, 0, vec![], 7_000);
    assert_eq!(sync_reply(&r, 70).unwrap().error, ILLEGAL_GENERATION);
    let r = c.join(71, join_req("g", "ghost", "x"), 7_000);
    assert_eq!(join_reply(&r, 71).unwrap().error, UNKNOWN_MEMBER_ID);
    let mut bad = join_req("g", "", "x");
    bad.protocol_type = "connect".into();
    let r = c.join(72, bad, 7_000);
    assert_eq!(
        join_reply(&r, 72).unwrap().error,
        INCONSISTENT_GROUP_PROTOCOL
    );
    let mut bad = join_req("g", "", "x");
    bad.session_timeout_ms = 10;
    let r = c.join(73, bad, 7_000);
    assert_eq!(join_reply(&r, 73).unwrap().error, INVALID_SESSION_TIMEOUT);
}

#[test]
fn leave_group_rebalances_the_remaining_member() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let (a, b) = stable_pair(&mut c, 0);
    let (codes, _) = c.leave(
        "g",
        &[LeavingMember {
            member_id: b.clone(),
            group_instance_id: None,
        }],
        8_000,
    );
    assert_eq!(codes, Ok(vec![NONE]));
    assert_eq!(c.heartbeat("g", &a, None, 1, 8_100), REBALANCE_IN_PROGRESS);
    let r = c.join(80, join_req("g", &a, "ca"), 8_200);
    assert_eq!(join_reply(&r, 80).unwrap().generation_id, 2);
    let (codes, _) = c.leave(
        "g",
        &[LeavingMember {
            member_id: a.clone(),
            group_instance_id: None,
        }],
        8_300,
    );
    assert_eq!(codes, Ok(vec![NONE]));
    // The last member left: the group empties at once with a new generation.
    assert_eq!(c.group_state("g"), Some(GroupState::Empty));
    assert_eq!(c.generation("g"), Some(3));
}

#[test]
fn static_member_restart_keeps_assignment_without_rebalance() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let mut req = join_req("g", "", "cs");
    req.group_instance_id = Some("instance-1".into());
    assert!(
        c.join(90, req.clone(), 0).is_empty(),
        "static members skip MEMBER_ID_REQUIRED"
    );
    let r = c.tick(3_000);
    let j = join_reply(&r, 90).unwrap();
    let old_id = j.member_id.clone();
    let r = c.sync(
        91,
        SyncRequest {
            group_id: "g".into(),
            member_id: old_id.clone(),
            group_instance_id: Some("instance-1".into()),
            generation_id: 1,
            assignments: vec![(old_id.clone(), Bytes::from_static(b"S"))],
            ..Default::default()
        },
        3_100,
    );
    assert_eq!(sync_reply(&r, 91).unwrap().error, NONE);
    // Restart: same instance id, no member id.
    let r = c.join(92, req, 4_000);
    let j = join_reply(&r, 92).unwrap();
    assert_eq!(j.error, NONE);
    assert_ne!(j.member_id, old_id);
    assert_eq!(j.generation_id, 1, "no rebalance for a static rejoin");
    assert_eq!(c.group_state("g"), Some(GroupState::Stable));
    assert_eq!(
        c.heartbeat("g", &old_id, Some("instance-1"), 1, 4_100),
        FENCED_INSTANCE_ID
    );
    assert_eq!(
        c.heartbeat("g", &j.member_id, Some("instance-1"), 1, 4_100),
        NONE
    );
}

fn commit(
    c: &mut GroupCoordinator,
    group: &str,
    topic: &str,
    p: i32,
    off: i64,
    now: i64,
) -> Result<Vec<i16>, i16> {
    c.commit_offsets(
        &CommitContext {
            group_id: group.into(),
            generation_id: -1,
            api_version: 9,
            ..Default::default()
        },
        &[OffsetToCommit {
            topic: topic.into(),
            partition: p,
            offset: off,
            leader_epoch: 3,
            metadata: Some("m".into()),
        }],
        now,
    )
}

#[test]
fn committed_offsets_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut c = open(dir.path(), 0);
        assert_eq!(commit(&mut c, "simple", "t", 0, 100, 1), Ok(vec![NONE]));
        assert_eq!(commit(&mut c, "simple", "t", 1, 200, 2), Ok(vec![NONE]));
        assert_eq!(commit(&mut c, "simple", "t", 0, 150, 3), Ok(vec![NONE]));
        c.flush().unwrap();
        // Dropped without any shutdown step, like a crash after the response.
    }
    let c = open(dir.path(), 10);
    let got = c.fetch_offsets("simple", None, false);
    let pairs: Vec<(i32, i64, i32)> = got
        .iter()
        .map(|f| (f.partition, f.offset, f.leader_epoch))
        .collect();
    assert_eq!(pairs, vec![(0, 150, 3), (1, 200, 3)]);
    assert_eq!(got[0].metadata.as_deref(), Some("m"));
    let missing = c.fetch_offsets("simple", Some(&[("t".into(), vec![9])]), false);
    assert_eq!(missing[0].offset, -1);
}

#[test]
fn group_generation_and_members_are_restored_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = {
        let mut c = open(dir.path(), 0);
        let pair = stable_pair(&mut c, 0);
        c.flush().unwrap();
        pair
    };
    let mut c = open(dir.path(), 100_000);
    assert_eq!(c.group_state("g"), Some(GroupState::Stable));
    assert_eq!(c.generation("g"), Some(1));
    assert_eq!(c.heartbeat("g", &a, None, 1, 100_001), NONE);
    let r = sync(&mut c, 5, "g", &b, 1, vec![], 100_002);
    assert_eq!(
        sync_reply(&r, 5).unwrap().assignment,
        Bytes::from_static(b"B")
    );
}

#[test]
fn offset_commit_to_unknown_group_with_generation_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let ctx = CommitContext {
        group_id: "nope".into(),
        member_id: "m".into(),
        generation_id: 3,
        api_version: 9,
        ..Default::default()
    };
    let off = [OffsetToCommit {
        topic: "t".into(),
        partition: 0,
        offset: 1,
        leader_epoch: -1,
        metadata: None,
    }];
    assert_eq!(c.commit_offsets(&ctx, &off, 0), Err(GROUP_ID_NOT_FOUND));
    let old = CommitContext {
        api_version: 8,
        ..ctx
    };
    assert_eq!(c.commit_offsets(&old, &off, 0), Err(ILLEGAL_GENERATION));
    let mut big = off.clone();
    big[0].metadata = Some("x".repeat(5000));
    assert_eq!(commit(&mut c, "simple", "t", 0, 1, 0), Ok(vec![NONE]));
    let simple = CommitContext {
        group_id: "simple".into(),
        generation_id: -1,
        api_version: 9,
        ..Default::default()
    };
    assert_eq!(
        c.commit_offsets(&simple, &big, 0),
        Ok(vec![OFFSET_METADATA_TOO_LARGE])
    );
}

#[test]
fn transactional_offsets_apply_only_on_commit_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut c = open(dir.path(), 0);
        let ctx = CommitContext {
            group_id: "tg".into(),
            generation_id: -1,
            ..Default::default()
        };
        let off = |o| {
            [OffsetToCommit {
                topic: "t".into(),
                partition: 0,
                offset: o,
                leader_epoch: -1,
                metadata: None,
            }]
        };
        assert_eq!(c.txn_commit_offsets(&ctx, 7, &off(10), 0), Ok(vec![NONE]));
        let f = c.fetch_offsets("tg", Some(&[("t".into(), vec![0])]), true);
        assert_eq!(f[0].error, UNSTABLE_OFFSET_COMMIT);
        let f = c.fetch_offsets("tg", Some(&[("t".into(), vec![0])]), false);
        assert_eq!(f[0].offset, -1, "pending offsets are invisible");
        c.complete_txn("tg", 7, false, 1);
        assert_eq!(
            c.fetch_offsets("tg", Some(&[("t".into(), vec![0])]), true)[0].offset,
            -1
        );
        assert_eq!(c.txn_commit_offsets(&ctx, 7, &off(20), 2), Ok(vec![NONE]));
        c.complete_txn("tg", 7, true, 3);
        // A pending commit from another producer survives the restart too.
        assert_eq!(c.txn_commit_offsets(&ctx, 8, &off(30), 4), Ok(vec![NONE]));
        c.flush().unwrap();
    }
    let mut c = open(dir.path(), 10);
    let f = c.fetch_offsets("tg", Some(&[("t".into(), vec![0])]), false);
    assert_eq!(f[0].offset, 20);
    c.complete_txn("tg", 8, true, 11);
    assert_eq!(c.fetch_offsets("tg", None, true)[0].offset, 30);
}

#[test]
fn delete_groups_requires_an_empty_group_and_forgets_its_offsets() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut c = open(dir.path(), 0);
        stable_pair(&mut c, 0);
        assert_eq!(commit(&mut c, "simple", "t", 0, 5, 1), Ok(vec![NONE]));
        assert_eq!(
            c.delete_groups(&["g".into(), "simple".into(), "missing".into()]),
            vec![NON_EMPTY_GROUP, NONE, GROUP_ID_NOT_FOUND]
        );
        c.flush().unwrap();
    }
    let c = open(dir.path(), 10);
    assert!(c.fetch_offsets("simple", None, false).is_empty());
    assert!(c.describe("simple").is_none());
}

#[test]
fn offset_delete_refuses_topics_the_active_group_consumes() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let (a, _) = stable_pair(&mut c, 0);
    let ctx = CommitContext {
        group_id: "g".into(),
        member_id: a,
        generation_id: 1,
        api_version: 9,
        ..Default::default()
    };
    for topic in ["t", "other"] {
        let off = [OffsetToCommit {
            topic: topic.into(),
            partition: 0,
            offset: 1,
            leader_epoch: -1,
            metadata: None,
        }];
        assert_eq!(c.commit_offsets(&ctx, &off, 7_000), Ok(vec![NONE]));
    }
    let r = c
        .delete_offsets("g", &[("t".into(), vec![0]), ("other".into(), vec![0])])
        .unwrap();
    assert_eq!(
        r,
        vec![
            ("t".into(), 0, GROUP_SUBSCRIBED_TO_TOPIC),
            ("other".into(), 0, NONE)
        ]
    );
    assert_eq!(c.fetch_offsets("g", None, false).len(), 1);
    assert_eq!(c.delete_offsets("zzz", &[]), Err(GROUP_ID_NOT_FOUND));
}

#[test]
fn subscription_topics_parses_consumer_protocol_metadata() {
    assert_eq!(
        subscription_topics(&subscription(&["a", "bb"])),
        Some(vec!["a".to_string(), "bb".to_string()])
    );
    assert_eq!(subscription_topics(&[0, 1, 0]), None);
}

#[test]
fn empty_group_without_offsets_is_forgotten_but_one_with_offsets_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let a = first_join(&mut c, "lonely", "ca", 10, 0);
    c.tick(3_000);
    let (codes, _) = c.leave(
        "lonely",
        &[LeavingMember {
            member_id: a,
            group_instance_id: None,
        }],
        2,
    );
    assert_eq!(codes, Ok(vec![NONE]));
    assert_eq!(commit(&mut c, "kept", "t", 0, 1, 3), Ok(vec![NONE]));
    assert_eq!(c.group_state("lonely"), Some(GroupState::Empty));
    c.tick(120_000);
    assert_eq!(c.group_state("lonely"), None);
    assert_eq!(c.group_state("kept"), Some(GroupState::Empty));
}

#[test]
fn offsets_log_is_compacted_on_open_and_keeps_the_latest_values() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut c = open(dir.path(), 0);
        for i in 0..3_000 {
            assert_eq!(
                commit(&mut c, "busy", "t", (i % 3) as i32, i, i),
                Ok(vec![NONE])
            );
        }
        c.flush().unwrap();
    }
    let path = dir.path().join("records.log");
    let before = std::fs::metadata(&path).unwrap().len();
    let c = open(dir.path(), 10);
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(after * 100 < before, "compacted {before} -> {after} bytes");
    let got: Vec<i64> = c
        .fetch_offsets("busy", None, false)
        .iter()
        .map(|f| f.offset)
        .collect();
    assert_eq!(got, vec![2_997, 2_998, 2_999]);
    drop(c);
    let c = open(dir.path(), 20);
    assert_eq!(c.fetch_offsets("busy", None, false).len(), 3);
}

#[test]
fn commit_between_join_and_sync_answers_rebalance_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let a = first_join(&mut c, "g", "ca", 10, 0);
    let r = c.tick(3_000);
    assert_eq!(join_reply(&r, 11).unwrap().generation_id, 1);
    assert_eq!(c.group_state("g"), Some(GroupState::CompletingRebalance));
    let ctx = CommitContext {
        group_id: "g".into(),
        member_id: a.clone(),
        generation_id: 1,
        api_version: 9,
        ..Default::default()
    };
    let off = [OffsetToCommit {
        topic: "t".into(),
        partition: 0,
        offset: 9,
        leader_epoch: -1,
        metadata: None,
    }];
    assert_eq!(
        c.commit_offsets(&ctx, &off, 3_100),
        Err(REBALANCE_IN_PROGRESS)
    );
    // Heartbeats are fine while the leader computes the assignment.
    assert_eq!(c.heartbeat("g", &a, None, 1, 3_100), NONE);
    let r = sync(
        &mut c,
        12,
        "g",
        &a,
        1,
        vec![(a.clone(), Bytes::new())],
        3_200,
    );
    assert_eq!(sync_reply(&r, 12).unwrap().error, NONE);
    assert_eq!(c.commit_offsets(&ctx, &off, 3_300), Ok(vec![NONE]));
}

const RETENTION: i64 = 60_000;

fn open_retaining(dir: &Path, now: i64) -> GroupCoordinator {
    GroupCoordinator::open(
        dir,
        GroupConfig {
            offsets_retention_ms: RETENTION,
            offsets_retention_check_interval_ms: 1,
            ..cfg()
        },
        now,
    )
    .unwrap()
}

fn committed(c: &GroupCoordinator, group: &str) -> Vec<(String, i32, i64)> {
    c.fetch_offsets(group, None, false)
        .into_iter()
        .map(|f| (f.topic, f.partition, f.offset))
        .collect()
}

fn listed(c: &GroupCoordinator) -> Vec<String> {
    c.list_groups(&[], &[])
        .into_iter()
        .map(|g| g.group_id)
        .collect()
}

#[test]
fn standalone_commits_expire_retention_after_their_commit_durably_with_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open_retaining(dir.path(), 0);
    assert_eq!(commit(&mut c, "simple", "t", 0, 100, 1_000), Ok(vec![NONE]));
    assert_eq!(
        commit(&mut c, "simple", "t", 1, 200, 20_000),
        Ok(vec![NONE])
    );
    c.tick(60_999);
    assert_eq!(committed(&c, "simple").len(), 2, "not yet");
    c.tick(61_000);
    assert_eq!(committed(&c, "simple"), [("t".to_string(), 1, 200)]);
    c.tick(80_000);
    assert!(committed(&c, "simple").is_empty());
    assert!(listed(&c).is_empty(), "the group goes with its last offset");
    c.flush().unwrap();
    drop(c);
    let c = open_retaining(dir.path(), 80_001);
    assert!(committed(&c, "simple").is_empty(), "the expiry is durable");
    assert!(listed(&c).is_empty());
}

#[test]
fn classic_group_offsets_expire_retention_after_it_became_empty() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open_retaining(dir.path(), 0);
    let (a, b) = stable_pair(&mut c, 0);
    let ctx = CommitContext {
        group_id: "g".into(),
        member_id: a.clone(),
        generation_id: 1,
        api_version: 9,
        ..Default::default()
    };
    let off = |topic: &str| OffsetToCommit {
        topic: topic.into(),
        partition: 0,
        offset: 5,
        leader_epoch: 0,
        metadata: None,
    };
    assert_eq!(
        c.commit_offsets(&ctx, &[off("t"), off("gone")], 7_000),
        Ok(vec![NONE, NONE])
    );
    // Stable and subscribed to "t" only: "gone" expires after its commit, "t" stays.
    assert!(!c.expire_offsets(66_999));
    assert!(c.expire_offsets(67_000));
    assert_eq!(committed(&c, "g"), [("t".to_string(), 0, 5)]);
    let leave = |c: &mut GroupCoordinator, m: &str, now| {
        c.leave(
            "g",
            &[LeavingMember {
                member_id: m.to_string(),
                group_instance_id: None,
            }],
            now,
        )
        .0
    };
    assert_eq!(leave(&mut c, &b, 68_000), Ok(vec![NONE]));
    assert_eq!(leave(&mut c, &a, 68_000), Ok(vec![NONE]));
    assert_eq!(c.group_state("g"), Some(GroupState::Empty));
    c.flush().unwrap();
    drop(c);
    // The time it became Empty is durable: a restart does not restart the clock.
    let mut c = open_retaining(dir.path(), 100_000);
    c.tick(127_999);
    assert_eq!(
        committed(&c, "g").len(),
        1,
        "an offset committed long ago, but empty 59.9 s"
    );
    c.tick(128_000);
    assert!(committed(&c, "g").is_empty());
    assert!(
        listed(&c).is_empty(),
        "the empty group without offsets is removed"
    );
}

#[test]
fn an_offsets_log_of_json_records_opens_and_takes_kafka_records_after_them() {
    let dir = tempfile::tempdir().unwrap();
    {
        // What main wrote before the coordinators used Kafka's record format.
        let (mut f, _) = crate::offsets_log::RecordFile::open(dir.path(), "records.log").unwrap();
        for json in [
            r#"{"t":"Offset","group":"old","topic":"t","partition":0,"offset":5,"leader_epoch":1,"metadata":"kept","ts":1}"#,
            r#"{"t":"Group","group":"old","generation":2,"protocol_type":"consumer","protocol":"range","leader":null,"members":[],"empty_since":1}"#,
            r#"{"t":"Offset","group":"gone","topic":"t","partition":0,"offset":9,"leader_epoch":1,"metadata":null,"ts":1}"#,
            r#"{"t":"GroupDeleted","group":"gone"}"#,
        ] {
            f.append(json.as_bytes()).unwrap();
        }
        f.sync().unwrap();
    }
    {
        let mut c = open(dir.path(), 10);
        assert_eq!(c.fetch_offsets("old", None, false)[0].offset, 5);
        assert!(c.fetch_offsets("gone", None, false).is_empty());
        assert_eq!(commit(&mut c, "old", "t", 1, 7, 11), Ok(vec![NONE]));
        c.flush().unwrap();
    }
    let c = open(dir.path(), 20);
    let got: Vec<(i32, i64, Option<String>)> = c
        .fetch_offsets("old", None, false)
        .into_iter()
        .map(|f| (f.partition, f.offset, f.metadata))
        .collect();
    assert_eq!(
        got,
        vec![(0, 5, Some("kept".into())), (1, 7, Some("m".into()))]
    );
    let listed = c.list_groups(&[], &[]);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].group_id, "old");
}
