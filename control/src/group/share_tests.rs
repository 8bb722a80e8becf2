//! Share groups hosted by the group coordinator: membership through heartbeats, the
//! initialize step, records that survive a restart, session expiry, deletion, and the
//! cross-type answers between share, classic and consumer groups.

use super::codes::*;
use super::consumer::{CgHeartbeat, TopicView};
use super::*;
use crate::share::group::Heartbeat;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use uuid::Uuid;

const T: Uuid = Uuid::from_u128(0x5157);

fn topics() -> TopicView {
    [("t".to_string(), (T, 2))].into_iter().collect()
}

fn open(dir: &Path, now: i64) -> GroupCoordinator {
    let mut c = GroupCoordinator::open(dir, GroupConfig::default(), now).unwrap();
    c.set_topics(Arc::new(topics()));
    c
}

fn hb(member: &str, epoch: i32) -> Heartbeat {
    Heartbeat {
        member_id: member.into(),
        member_epoch: epoch,
        rack_id: None,
        subscribed_topics: (epoch == 0).then(|| vec!["t".to_string()]),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
    }
}

fn assigned(r: &ShareHeartbeatOk) -> usize {
    r.reply
        .assignment
        .as_ref()
        .map_or(0, |a| a.values().map(|p| p.len()).sum())
}

/// A member that joined `g` and was assigned both partitions (after initializing them).
fn joined(c: &mut GroupCoordinator, member: &str, now: i64) -> i32 {
    let r = c
        .share_heartbeat("g", &hb(member, 0), &topics(), now)
        .unwrap();
    assert_eq!(r.reply.initialize, vec![(T, 0), (T, 1)]);
    c.share_initialized("g", &r.reply.initialize);
    let r = c
        .share_heartbeat("g", &hb(member, r.reply.member_epoch), &topics(), now + 1)
        .unwrap();
    assert_eq!(assigned(&r), 2);
    r.reply.member_epoch
}

#[test]
fn a_share_group_is_written_as_records_and_comes_back_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let epoch = joined(&mut c, "m1", 0);
    assert_eq!(c.group_type("g"), Some("share"));
    let listed = c.list_groups(&[], &["share".to_string()]);
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].protocol_type.as_str(), listed[0].state_name),
        ("share", "Stable")
    );
    c.flush().unwrap();
    let before = c.share_describe("g").unwrap().group;
    drop(c);

    let mut c = open(dir.path(), 10);
    let after = c.share_describe("g").unwrap();
    assert_eq!(after.state, "Stable");
    assert_eq!(after.group.epoch, before.epoch);
    assert_eq!(after.group.assignment_epoch, before.assignment_epoch);
    assert_eq!(after.group.initialized, before.initialized);
    let (m0, m1) = (&before.members["m1"], &after.group.members["m1"]);
    assert_eq!(
        (m1.epoch, &m1.assigned, &m1.subscribed, &m1.client_host),
        (m0.epoch, &m0.assigned, &m0.subscribed, &m0.client_host)
    );
    // The member carries on with its epoch, keeping its partitions.
    let r = c
        .share_heartbeat("g", &hb("m1", epoch), &topics(), 20)
        .unwrap();
    assert_eq!(r.reply.member_epoch, epoch);
    // A compaction rewrites the same state.
    c.compact().unwrap();
    c.flush().unwrap();
    drop(c);
    let c = open(dir.path(), 30);
    assert_eq!(c.share_describe("g").unwrap().group.members.len(), 1);
}

#[test]
fn an_expired_member_leaves_and_an_empty_share_group_can_be_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    joined(&mut c, "m1", 0);
    assert_eq!(c.delete_groups(&["g".to_string()]), vec![NON_EMPTY_GROUP]);
    c.tick(44_000);
    assert_eq!(c.share_describe("g").unwrap().state, "Stable");
    c.tick(46_000);
    assert_eq!(c.share_describe("g").unwrap().state, "Empty");
    c.flush().unwrap();
    drop(c);
    let mut c = open(dir.path(), 50_000);
    assert_eq!(c.share_describe("g").unwrap().state, "Empty");
    assert_eq!(c.delete_groups(&["g".to_string()]), vec![NONE]);
    assert_eq!(c.group_type("g"), None);
    c.flush().unwrap();
    drop(c);
    let c = open(dir.path(), 60_000);
    assert_eq!(
        c.share_describe("g").unwrap_err(),
        (GROUP_ID_NOT_FOUND, "Group g not found.".to_string())
    );
}

#[test]
fn share_classic_and_consumer_groups_refuse_each_others_ids_as_kafka_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    joined(&mut c, "m1", 0);
    // The consumer and classic APIs on a share group.
    let cg = CgHeartbeat {
        group_id: "g".into(),
        member_id: "x".into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Default::default()),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        api_version: 1,
        ..Default::default()
    };
    let r = c.consumer_heartbeat(&cg, &topics(), 1).0;
    assert_eq!(
        (r.error, r.message.as_deref()),
        (GROUP_ID_NOT_FOUND, Some("Group g is not a consumer group."))
    );
    let join = JoinRequest {
        group_id: "g".into(),
        member_id: String::new(),
        group_instance_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), bytes::Bytes::new())],
        require_known_member_id: false,
    };
    match c.join(1, join, 2).as_slice() {
        [Reply::Join(1, r)] => assert_eq!(r.error, INCONSISTENT_GROUP_PROTOCOL),
        other => panic!("{other:?}"),
    }
    let commit = CommitContext {
        group_id: "g".into(),
        member_id: String::new(),
        group_instance_id: None,
        generation_id: -1,
        api_version: 9,
    };
    let offset = OffsetToCommit {
        topic: "t".into(),
        partition: 0,
        offset: 5,
        leader_epoch: -1,
        metadata: None,
    };
    assert_eq!(
        c.commit_offsets(&commit, std::slice::from_ref(&offset), 3),
        Err(GROUP_ID_NOT_FOUND)
    );

    // A share heartbeat on a classic group (here one that only holds committed offsets).
    let standalone = CommitContext {
        group_id: "classic".into(),
        ..commit
    };
    assert_eq!(c.commit_offsets(&standalone, &[offset], 4), Ok(vec![NONE]));
    assert_eq!(
        c.share_heartbeat("classic", &hb("m", 0), &topics(), 5)
            .unwrap_err(),
        (
            GROUP_ID_NOT_FOUND,
            Some("Group classic is not a share group.".into())
        )
    );
    assert_eq!(
        c.share_describe("classic").unwrap_err(),
        (
            GROUP_ID_NOT_FOUND,
            "Group classic is not a share group.".into()
        )
    );
    // A heartbeat other than a join needs the group.
    assert_eq!(
        c.share_heartbeat("none", &hb("m", 3), &topics(), 6)
            .unwrap_err()
            .0,
        GROUP_ID_NOT_FOUND
    );
}

#[test]
fn a_share_groups_own_configs_set_its_session_timeout_and_heartbeat_interval() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    let configs: BTreeMap<String, BTreeMap<String, String>> = [(
        "g".to_string(),
        [
            ("share.session.timeout.ms".to_string(), "50000".to_string()),
            (
                "share.heartbeat.interval.ms".to_string(),
                "6000".to_string(),
            ),
        ]
        .into(),
    )]
    .into();
    c.set_group_configs(Arc::new(configs));
    let r = c.share_heartbeat("g", &hb("m1", 0), &topics(), 0).unwrap();
    assert_eq!(r.heartbeat_interval_ms, 6000);
    c.tick(46_000);
    assert_eq!(c.share_describe("g").unwrap().state, "Stable");
    c.tick(50_001);
    assert_eq!(c.share_describe("g").unwrap().state, "Empty");
}

#[test]
fn a_mirror_sync_creates_an_empty_share_group_bumps_its_epoch_and_never_takes_a_busy_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(dir.path(), 0);
    // Missing: created Empty at epoch 1, and written (it survives a restart).
    assert_eq!(c.share_mirror_target("mirrored"), Ok(1));
    c.share_initialized("mirrored", &[(T, 0)]);
    assert_eq!(c.share_mirror_target("mirrored"), Ok(2));
    c.flush().unwrap();
    drop(c);
    let mut c = open(dir.path(), 10);
    let d = c.share_describe("mirrored").unwrap();
    assert_eq!((d.state, d.group.epoch), ("Empty", 2));
    assert!(d.group.initialized.contains(&(T, 0)));
    assert_eq!(c.group_type("mirrored"), Some("share"));

    // A group with a member is the destination's own: refused, and left as it was.
    joined(&mut c, "m1", 10);
    let before = c.share_describe("g").unwrap().group.epoch;
    assert_eq!(c.share_mirror_target("g").unwrap_err().0, NON_EMPTY_GROUP);
    assert_eq!(c.share_describe("g").unwrap().group.epoch, before);
    assert_eq!(c.share_mirror_target("").unwrap_err().0, INVALID_GROUP_ID);
}
