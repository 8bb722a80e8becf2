//! Share groups (KIP-932) on the coordinator thread: the group coordinator's
//! ShareGroupHeartbeat (76) and ShareGroupDescribe (77), and the share coordinator's state
//! RPCs (83–87) over the `__share_group_state` partitions this node leads.
//!
//! A heartbeat that hands back partitions to initialize has them initialized here, in the
//! same batch, when their state partitions are led here: the snapshot record and the group's
//! "initialized" record are flushed together, so the next heartbeat may assign them. A state
//! partition led elsewhere (or not yet) is left for a later heartbeat (Kafka re-sends an
//! initialize that did not complete), which the group's `initialize_retry_ms` paces.

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kmirror_control::group::codes;
use kmirror_control::group::consumer::TopicView;
use kmirror_control::replicated::CoordinatorLog;
use kmirror_control::share::coordinator::StateError;
use kmirror_control::share::group::Heartbeat;
use kmirror_control::share::partition::{RecordState, StateBatch};
use kmirror_control::share::state_record::{kafka_uuid_string, StateKey};
use kmirror_types::Offset;

use super::CoordinatorThread;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// Kafka's coordinator key of a share partition (`SharePartitionKey`'s string), which
/// `partition_for` maps to its `__share_group_state` partition.
fn coordinator_key(k: &StateKey) -> String {
    format!("{}:{}:{}", k.group, kafka_uuid_string(k.topic), k.partition)
}

fn key(group: &str, topic: uuid::Uuid, partition: i32) -> StateKey {
    StateKey {
        group: group.to_string(),
        topic,
        partition,
    }
}

impl CoordinatorThread {
    /// NONE when the share coordinator of `k` is loaded here, else the code to answer.
    fn share_key_code(&self, k: &StateKey) -> i16 {
        if self.seat.is_none() {
            return codes::NOT_COORDINATOR;
        }
        self.key_code(CoordinatorLog::ShareState, &coordinator_key(k))
    }

    /// ShareGroupHeartbeat (76).
    pub(super) fn share_heartbeat(
        &mut self,
        r: &ShareGroupHeartbeatRequest,
        client_id: &str,
        topics: &TopicView,
        now: i64,
    ) -> ResponseKind {
        let hb = Heartbeat {
            member_id: r.member_id.to_string(),
            member_epoch: r.member_epoch,
            rack_id: r.rack_id.as_ref().map(|x| x.to_string()),
            subscribed_topics: r
                .subscribed_topic_names
                .as_ref()
                .map(|ts| ts.iter().map(|t| t.0.to_string()).collect()),
            client_id: client_id.to_string(),
            client_host: "/127.0.0.1".to_string(),
        };
        let group = r.group_id.0.to_string();
        match self.groups.share_heartbeat(&group, &hb, topics, now) {
            Err((code, msg)) => ResponseKind::ShareGroupHeartbeat(
                ShareGroupHeartbeatResponse::default()
                    .with_error_code(code)
                    .with_error_message(msg.as_deref().map(s)),
            ),
            Ok(ok) => {
                if !ok.reply.initialize.is_empty() {
                    self.initialize_shares(
                        &group,
                        &ok.reply.initialize,
                        ok.reply.initialize_epoch,
                        now,
                    );
                }
                let assignment = ok.reply.assignment.map(|a| {
                    share_group_heartbeat_response::Assignment::default().with_topic_partitions(
                        a.into_iter()
                            .map(|(id, ps)| {
                                share_group_heartbeat_response::TopicPartitions::default()
                                    .with_topic_id(id)
                                    .with_partitions(ps.into_iter().collect())
                            })
                            .collect(),
                    )
                });
                ResponseKind::ShareGroupHeartbeat(
                    ShareGroupHeartbeatResponse::default()
                        .with_member_id(Some(r.member_id.clone()))
                        .with_member_epoch(ok.reply.member_epoch)
                        .with_heartbeat_interval_ms(ok.heartbeat_interval_ms)
                        .with_assignment(assignment),
                )
            }
        }
    }

    /// Initializes the share state of `parts` whose state partitions are led here, at
    /// `state_epoch` with the start offset left to the leader's auto-offset-reset (-1).
    fn initialize_shares(
        &mut self,
        group: &str,
        parts: &[(uuid::Uuid, i32)],
        state_epoch: i32,
        now: i64,
    ) {
        self.initialize_shares_at(group, parts, state_epoch, -1, now);
    }

    /// Initializes the share state of `parts` at `state_epoch` and `start_offset`: here when
    /// its state partition is led here, else on its coordinator (reported back later).
    fn initialize_shares_at(
        &mut self,
        group: &str,
        parts: &[(uuid::Uuid, i32)],
        state_epoch: i32,
        start_offset: i64,
        now: i64,
    ) {
        let (mut done, mut failed, mut remote) = (Vec::new(), Vec::new(), Vec::new());
        for &(topic, partition) in parts {
            let k = key(group, topic, partition);
            match self.share_key_code(&k) {
                codes::NONE
                    if self
                        .shares
                        .initialize(&k, state_epoch, start_offset, now)
                        .is_ok() =>
                {
                    done.push((topic, partition))
                }
                // Led by another node: its share coordinator is asked, as Kafka's persister.
                codes::NOT_COORDINATOR if self.seat.is_some() => remote.push((topic, partition)),
                _ => failed.push((topic, partition)),
            }
        }
        if !remote.is_empty() {
            let report = super::ShareInitDone {
                group: group.to_string(),
                tx: self.self_tx.clone(),
                generation: self.generation,
            };
            if let Err(e) = self.markers.initialize_share_state(
                group.to_string(),
                remote.clone(),
                state_epoch,
                start_offset,
                report,
            ) {
                tracing::debug!(group, error = %e, "cannot start a remote share state initialize");
                failed.extend(remote);
            }
        }
        if !done.is_empty() {
            self.groups.share_initialized(group, &done);
        }
        if !failed.is_empty() {
            tracing::debug!(group, ?failed, "share state not initialized yet; retried");
            self.groups.share_initialize_failed(group, &failed);
        }
    }

    /// DescribeShareGroupOffsets (90): each group's start offsets, from the share state
    /// partitions led here; a partition whose state is led elsewhere is answered
    /// NOT_COORDINATOR, which the broker replaces with that coordinator's summary. As Kafka,
    /// named topics are described whether or not the group exists (an unknown topic: topic id
    /// zero, start offset -1), and no topics means the group's initialized partitions.
    pub(super) fn share_offsets(
        &self,
        r: &DescribeShareGroupOffsetsRequest,
        topics: &TopicView,
    ) -> ResponseKind {
        use describe_share_group_offsets_response as o;
        let names: std::collections::BTreeMap<uuid::Uuid, &String> =
            topics.iter().map(|(n, (id, _))| (*id, n)).collect();
        let groups = r
            .groups
            .iter()
            .map(|g| {
                let wanted: Vec<(String, uuid::Uuid, Vec<i32>)> = match &g.topics {
                    Some(ts) => ts
                        .iter()
                        .map(|t| {
                            let id = topics.get(t.topic_name.0.as_str()).map(|(id, _)| *id);
                            (
                                t.topic_name.0.to_string(),
                                id.unwrap_or(uuid::Uuid::nil()),
                                t.partitions.clone(),
                            )
                        })
                        .collect(),
                    None => {
                        let mut by: std::collections::BTreeMap<uuid::Uuid, Vec<i32>> =
                            Default::default();
                        for (t, p) in self.groups.share_initialized_partitions(&g.group_id.0) {
                            by.entry(t).or_default().push(p);
                        }
                        by.into_iter()
                            .filter_map(|(id, ps)| Some(((*names.get(&id)?).clone(), id, ps)))
                            .collect()
                    }
                };
                let topics = wanted
                    .into_iter()
                    .map(|(name, id, ps)| {
                        let partitions = ps
                            .into_iter()
                            .map(|p| {
                                let part = o::DescribeShareGroupOffsetsResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_start_offset(-1)
                                    .with_leader_epoch(0);
                                if id.is_nil() {
                                    return part;
                                }
                                let k = key(&g.group_id.0, id, p);
                                match self.share_key_code(&k) {
                                    codes::NONE => match self.shares.summary(&k) {
                                        Ok(sum) => part
                                            .with_start_offset(sum.start_offset)
                                            .with_leader_epoch(sum.leader_epoch),
                                        Err(_) => part,
                                    },
                                    _ => part.with_error_code(codes::NOT_COORDINATOR),
                                }
                            })
                            .collect();
                        o::DescribeShareGroupOffsetsResponseTopic::default()
                            .with_topic_name(kafka_protocol::messages::TopicName(s(&name)))
                            .with_topic_id(id)
                            .with_partitions(partitions)
                    })
                    .collect();
                o::DescribeShareGroupOffsetsResponseGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_topics(topics)
            })
            .collect();
        ResponseKind::DescribeShareGroupOffsets(
            DescribeShareGroupOffsetsResponse::default().with_groups(groups),
        )
    }

    /// AlterShareGroupOffsets (91): an Empty share group's start offsets set, each partition
    /// initialized again at the group epoch with the new start offset (its in-flight state
    /// dropped), as Kafka does.
    pub(super) fn share_alter_offsets(
        &mut self,
        r: &AlterShareGroupOffsetsRequest,
        topics: &TopicView,
        now: i64,
    ) -> ResponseKind {
        use alter_share_group_offsets_response as o;
        let group = r.group_id.0.to_string();
        let top = |code: i16, msg: Option<String>| {
            ResponseKind::AlterShareGroupOffsets(
                AlterShareGroupOffsetsResponse::default()
                    .with_error_code(code)
                    .with_error_message(msg.as_deref().map(s)),
            )
        };
        if group.is_empty() {
            return top(codes::INVALID_GROUP_ID, None);
        }
        if r.topics.is_empty() {
            return top(codes::NONE, None);
        }
        let mirror_sync = r
            .unknown_tagged_fields
            .contains_key(&kmirror_control::share::MIRROR_SYNC_TAG);
        let editable = if mirror_sync {
            self.groups.share_mirror_target(&group)
        } else {
            self.groups.share_offsets_editable(&group)
        };
        let epoch = match editable {
            Ok(e) => e,
            Err((code, msg)) => return top(code, Some(msg)),
        };
        let mut responses = Vec::new();
        for t in &r.topics {
            let known = topics.get(t.topic_name.0.as_str()).copied();
            let mut parts = Vec::new();
            let mut valid = Vec::new();
            for p in &t.partitions {
                let ok =
                    known.is_some_and(|(_, n)| p.partition_index >= 0 && p.partition_index < n);
                let code = if ok {
                    codes::NONE
                } else {
                    codes::UNKNOWN_TOPIC_OR_PARTITION
                };
                if let (true, Some((id, _))) = (ok, known) {
                    valid.push(((id, p.partition_index), p.start_offset));
                }
                parts.push(
                    o::AlterShareGroupOffsetsResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code),
                );
            }
            for (tp, start) in valid {
                self.initialize_shares_at(&group, &[tp], epoch, start, now);
            }
            responses.push(
                o::AlterShareGroupOffsetsResponseTopic::default()
                    .with_topic_name(t.topic_name.clone())
                    .with_topic_id(known.map(|(id, _)| id).unwrap_or_default())
                    .with_partitions(parts),
            );
        }
        ResponseKind::AlterShareGroupOffsets(
            AlterShareGroupOffsetsResponse::default().with_responses(responses),
        )
    }

    /// DeleteShareGroupOffsets (92): an Empty share group forgets its topics' start offsets
    /// (their state deleted where it is led here; elsewhere it is overwritten when a member
    /// initializes them again).
    pub(super) fn share_delete_offsets(
        &mut self,
        r: &DeleteShareGroupOffsetsRequest,
        topics: &TopicView,
    ) -> ResponseKind {
        use delete_share_group_offsets_response as o;
        let group = r.group_id.0.to_string();
        let top = |code: i16, msg: Option<String>| {
            ResponseKind::DeleteShareGroupOffsets(
                DeleteShareGroupOffsetsResponse::default()
                    .with_error_code(code)
                    .with_error_message(msg.as_deref().map(s)),
            )
        };
        if group.is_empty() {
            return top(codes::INVALID_GROUP_ID, None);
        }
        if let Err((code, msg)) = self.groups.share_offsets_editable(&group) {
            return top(code, Some(msg));
        }
        let mut responses = Vec::new();
        for t in &r.topics {
            let id = topics.get(t.topic_name.0.as_str()).map(|(id, _)| *id);
            let gone = id.map_or_else(Vec::new, |id| self.groups.share_forget_topic(&group, id));
            let entry = o::DeleteShareGroupOffsetsResponseTopic::default()
                .with_topic_name(t.topic_name.clone())
                .with_topic_id(id.unwrap_or_default());
            if gone.is_empty() {
                // As Kafka: a topic the cluster does not have is refused without a message.
                let msg = id.map(|_| s("There is no offset information to delete."));
                responses.push(
                    entry
                        .with_error_code(codes::UNKNOWN_TOPIC_OR_PARTITION)
                        .with_error_message(msg),
                );
                continue;
            }
            let topic = id.unwrap_or_default();
            let parts: Vec<(uuid::Uuid, i32)> = gone.into_iter().map(|p| (topic, p)).collect();
            self.delete_shares(&group, &parts);
            responses.push(entry);
        }
        ResponseKind::DeleteShareGroupOffsets(
            DeleteShareGroupOffsetsResponse::default().with_responses(responses),
        )
    }

    /// Deletes the share state of `parts` of `group`: here where its state partition is led
    /// here, else on its share coordinator (not waited for; see
    /// [`super::MarkerSink::delete_share_state`]).
    pub(super) fn delete_shares(&mut self, group: &str, parts: &[(uuid::Uuid, i32)]) {
        let mut remote = Vec::new();
        for &(topic, partition) in parts {
            let k = key(group, topic, partition);
            match self.share_key_code(&k) {
                codes::NONE => {
                    if let Err(e) = self.shares.delete(&k) {
                        tracing::warn!(group, error = %e, "deleting share state failed");
                    }
                }
                codes::NOT_COORDINATOR if self.seat.is_some() => remote.push((topic, partition)),
                c => tracing::debug!(group, code = c, "share state not deleted: no coordinator"),
            }
        }
        if !remote.is_empty() {
            if let Err(e) = self.markers.delete_share_state(group.to_string(), remote) {
                tracing::debug!(group, error = %e, "cannot start a remote share state delete");
            }
        }
    }

    /// The outcome of a remote initialize started by [`Self::initialize_shares`].
    pub(super) fn share_initialized_remotely(
        &mut self,
        group: &str,
        ok: &[(uuid::Uuid, i32)],
        failed: &[(uuid::Uuid, i32)],
    ) {
        if !ok.is_empty() {
            self.groups.share_initialized(group, ok);
        }
        if !failed.is_empty() {
            tracing::debug!(
                group,
                ?failed,
                "remote share state not initialized yet; retried"
            );
            self.groups.share_initialize_failed(group, failed);
        }
    }

    /// ShareGroupDescribe (77).
    pub(super) fn share_describe(
        &mut self,
        r: &ShareGroupDescribeRequest,
        topics: &TopicView,
    ) -> ResponseKind {
        use share_group_describe_response as d;
        let names: std::collections::HashMap<uuid::Uuid, &String> =
            topics.iter().map(|(n, (id, _))| (*id, n)).collect();
        let groups = r
            .group_ids
            .iter()
            .map(|id| {
                let g = d::DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_authorized_operations(i32::MIN);
                if id.0.is_empty() {
                    return g.with_error_code(codes::INVALID_GROUP_ID);
                }
                match self.groups.share_describe(&id.0) {
                    Err((code, msg)) => g.with_error_code(code).with_error_message(Some(s(&msg))),
                    Ok(desc) => {
                        let members = desc
                            .group
                            .members
                            .iter()
                            .map(|(mid, m)| {
                                let mut by_topic: std::collections::BTreeMap<uuid::Uuid, Vec<i32>> =
                                    Default::default();
                                for (t, p) in &m.assigned {
                                    by_topic.entry(*t).or_default().push(*p);
                                }
                                d::Member::default()
                                    .with_member_id(s(mid))
                                    .with_rack_id(m.rack_id.as_deref().map(s))
                                    .with_member_epoch(m.epoch)
                                    .with_client_id(s(&m.client_id))
                                    .with_client_host(s(&m.client_host))
                                    .with_subscribed_topic_names(
                                        m.subscribed.iter().map(|t| TopicName(s(t))).collect(),
                                    )
                                    .with_assignment(
                                        d::Assignment::default().with_topic_partitions(
                                            by_topic
                                                .into_iter()
                                                .map(|(t, ps)| {
                                                    d::TopicPartitions::default()
                                                        .with_topic_id(t)
                                                        .with_topic_name(TopicName(s(names
                                                            .get(&t)
                                                            .map(|n| n.as_str())
                                                            .unwrap_or_default())))
                                                        .with_partitions(ps)
                                                })
                                                .collect(),
                                        ),
                                    )
                            })
                            .collect();
                        g.with_group_state(s(desc.state))
                            .with_group_epoch(desc.group.epoch)
                            .with_assignment_epoch(desc.group.assignment_epoch)
                            .with_assignor_name(s("simple"))
                            .with_members(members)
                    }
                }
            })
            .collect();
        ResponseKind::ShareGroupDescribe(ShareGroupDescribeResponse::default().with_groups(groups))
    }

    /// The share coordinator's state RPCs (83–87); `None` for any other request. A partition
    /// whose state partition is not loaded here gets NOT_COORDINATOR (or
    /// COORDINATOR_LOAD_IN_PROGRESS) in its own result.
    pub(super) fn share_state_rpc(&mut self, req: &RequestKind, now: i64) -> Option<ResponseKind> {
        let code_of = |e: StateError| e.code();
        Some(match req {
            RequestKind::InitializeShareGroupState(r) => {
                use initialize_share_group_state_response as o;
                let results = r
                    .topics
                    .iter()
                    .map(|t| {
                        let partitions = t
                            .partitions
                            .iter()
                            .map(|p| {
                                let k = key(&r.group_id, t.topic_id, p.partition);
                                let code = match self.share_key_code(&k) {
                                    codes::NONE => self
                                        .shares
                                        .initialize(&k, p.state_epoch, p.start_offset, now)
                                        .map_or_else(code_of, |()| codes::NONE),
                                    c => c,
                                };
                                o::PartitionResult::default()
                                    .with_partition(p.partition)
                                    .with_error_code(code)
                            })
                            .collect();
                        o::InitializeStateResult::default()
                            .with_topic_id(t.topic_id)
                            .with_partitions(partitions)
                    })
                    .collect();
                ResponseKind::InitializeShareGroupState(
                    InitializeShareGroupStateResponse::default().with_results(results),
                )
            }
            RequestKind::ReadShareGroupState(r) => {
                use read_share_group_state_response as o;
                let results = r
                    .topics
                    .iter()
                    .map(|t| {
                        let partitions = t
                            .partitions
                            .iter()
                            .map(|p| {
                                let k = key(&r.group_id, t.topic_id, p.partition);
                                let res = o::PartitionResult::default()
                                    .with_partition(p.partition)
                                    .with_state_epoch(-1)
                                    .with_start_offset(-1);
                                let code = self.share_key_code(&k);
                                if code != codes::NONE {
                                    return res.with_error_code(code);
                                }
                                match self.shares.read(&k, p.leader_epoch) {
                                    Err(e) => res.with_error_code(e.code()),
                                    Ok(st) => res
                                        .with_state_epoch(st.state_epoch)
                                        .with_start_offset(st.start_offset)
                                        .with_state_batches(
                                            st.batches
                                                .iter()
                                                .map(|b| {
                                                    o::StateBatch::default()
                                                        .with_first_offset(b.first.0)
                                                        .with_last_offset(b.last.0)
                                                        .with_delivery_state(b.state.code())
                                                        .with_delivery_count(b.delivery_count)
                                                })
                                                .collect(),
                                        ),
                                }
                            })
                            .collect();
                        o::ReadStateResult::default()
                            .with_topic_id(t.topic_id)
                            .with_partitions(partitions)
                    })
                    .collect();
                ResponseKind::ReadShareGroupState(
                    ReadShareGroupStateResponse::default().with_results(results),
                )
            }
            RequestKind::WriteShareGroupState(r) => {
                use write_share_group_state_response as o;
                let results = r
                    .topics
                    .iter()
                    .map(|t| {
                        let partitions = t
                            .partitions
                            .iter()
                            .map(|p| {
                                let k = key(&r.group_id, t.topic_id, p.partition);
                                let batches: Option<Vec<StateBatch>> = p
                                    .state_batches
                                    .iter()
                                    .map(|b| {
                                        Some(StateBatch {
                                            first: Offset(b.first_offset),
                                            last: Offset(b.last_offset),
                                            state: RecordState::from_code(b.delivery_state)?,
                                            delivery_count: b.delivery_count,
                                        })
                                    })
                                    .collect();
                                let code = match (self.share_key_code(&k), batches) {
                                    (codes::NONE, Some(batches)) => self
                                        .shares
                                        .write(
                                            &k,
                                            p.state_epoch,
                                            p.leader_epoch,
                                            p.start_offset,
                                            &batches,
                                            now,
                                        )
                                        .map_or_else(code_of, |()| codes::NONE),
                                    (codes::NONE, None) => codes::INVALID_REQUEST,
                                    (c, _) => c,
                                };
                                o::PartitionResult::default()
                                    .with_partition(p.partition)
                                    .with_error_code(code)
                            })
                            .collect();
                        o::WriteStateResult::default()
                            .with_topic_id(t.topic_id)
                            .with_partitions(partitions)
                    })
                    .collect();
                ResponseKind::WriteShareGroupState(
                    WriteShareGroupStateResponse::default().with_results(results),
                )
            }
            RequestKind::DeleteShareGroupState(r) => {
                use delete_share_group_state_response as o;
                let results = r
                    .topics
                    .iter()
                    .map(|t| {
                        let partitions = t
                            .partitions
                            .iter()
                            .map(|p| {
                                let k = key(&r.group_id, t.topic_id, p.partition);
                                let code = match self.share_key_code(&k) {
                                    codes::NONE => self
                                        .shares
                                        .delete(&k)
                                        .map_or_else(code_of, |()| codes::NONE),
                                    c => c,
                                };
                                o::PartitionResult::default()
                                    .with_partition(p.partition)
                                    .with_error_code(code)
                            })
                            .collect();
                        o::DeleteStateResult::default()
                            .with_topic_id(t.topic_id)
                            .with_partitions(partitions)
                    })
                    .collect();
                ResponseKind::DeleteShareGroupState(
                    DeleteShareGroupStateResponse::default().with_results(results),
                )
            }
            RequestKind::ReadShareGroupStateSummary(r) => {
                use read_share_group_state_summary_response as o;
                let results = r
                    .topics
                    .iter()
                    .map(|t| {
                        let partitions = t
                            .partitions
                            .iter()
                            .map(|p| {
                                let k = key(&r.group_id, t.topic_id, p.partition);
                                let res = o::PartitionResult::default()
                                    .with_partition(p.partition)
                                    .with_state_epoch(-1)
                                    .with_leader_epoch(-1)
                                    .with_start_offset(-1);
                                match self.share_key_code(&k) {
                                    codes::NONE => match self.shares.summary(&k) {
                                        Ok(sm) => res
                                            .with_state_epoch(sm.state_epoch)
                                            .with_leader_epoch(sm.leader_epoch)
                                            .with_start_offset(sm.start_offset),
                                        Err(e) => res.with_error_code(e.code()),
                                    },
                                    c => res.with_error_code(c),
                                }
                            })
                            .collect();
                        o::ReadStateSummaryResult::default()
                            .with_topic_id(t.topic_id)
                            .with_partitions(partitions)
                    })
                    .collect();
                ResponseKind::ReadShareGroupStateSummary(
                    ReadShareGroupStateSummaryResponse::default().with_results(results),
                )
            }
            _ => return None,
        })
    }
}

/// The error answer of a share request (`None`: not a share request).
/// The results of a state RPC `$r` (83–87), one per partition from `$part`: the five RPCs'
/// nested result lists have one shape but types of their own.
macro_rules! state_results {
    ($r:expr, $result:path, |$p:ident| $part:expr) => {
        $r.topics
            .iter()
            .map(|t| {
                <$result>::default()
                    .with_topic_id(t.topic_id)
                    .with_partitions(t.partitions.iter().map(|$p| $part).collect())
            })
            .collect()
    };
}

pub(super) fn share_error_response(req: &RequestKind, code: i16) -> Option<ResponseKind> {
    Some(match req {
        RequestKind::DescribeShareGroupOffsets(r) => {
            use describe_share_group_offsets_response as o;
            ResponseKind::DescribeShareGroupOffsets(
                DescribeShareGroupOffsetsResponse::default().with_groups(
                    r.groups
                        .iter()
                        .map(|g| {
                            o::DescribeShareGroupOffsetsResponseGroup::default()
                                .with_group_id(g.group_id.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::AlterShareGroupOffsets(_) => ResponseKind::AlterShareGroupOffsets(
            AlterShareGroupOffsetsResponse::default().with_error_code(code),
        ),
        RequestKind::DeleteShareGroupOffsets(_) => ResponseKind::DeleteShareGroupOffsets(
            DeleteShareGroupOffsetsResponse::default().with_error_code(code),
        ),
        RequestKind::ShareGroupHeartbeat(_) => ResponseKind::ShareGroupHeartbeat(
            ShareGroupHeartbeatResponse::default().with_error_code(code),
        ),
        RequestKind::ShareGroupDescribe(r) => ResponseKind::ShareGroupDescribe(
            ShareGroupDescribeResponse::default().with_groups(
                r.group_ids
                    .iter()
                    .map(|g| {
                        share_group_describe_response::DescribedGroup::default()
                            .with_group_id(g.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        RequestKind::InitializeShareGroupState(r) => {
            use initialize_share_group_state_response as o;
            ResponseKind::InitializeShareGroupState(
                InitializeShareGroupStateResponse::default().with_results(state_results!(
                    r,
                    o::InitializeStateResult,
                    |p| o::PartitionResult::default()
                        .with_partition(p.partition)
                        .with_error_code(code)
                )),
            )
        }
        RequestKind::ReadShareGroupState(r) => {
            use read_share_group_state_response as o;
            ResponseKind::ReadShareGroupState(ReadShareGroupStateResponse::default().with_results(
                state_results!(r, o::ReadStateResult, |p| {
                    o::PartitionResult::default()
                        .with_partition(p.partition)
                        .with_error_code(code)
                        .with_state_epoch(-1)
                        .with_start_offset(-1)
                }),
            ))
        }
        RequestKind::WriteShareGroupState(r) => {
            use write_share_group_state_response as o;
            ResponseKind::WriteShareGroupState(
                WriteShareGroupStateResponse::default().with_results(state_results!(
                    r,
                    o::WriteStateResult,
                    |p| o::PartitionResult::default()
                        .with_partition(p.partition)
                        .with_error_code(code)
                )),
            )
        }
        RequestKind::DeleteShareGroupState(r) => {
            use delete_share_group_state_response as o;
            ResponseKind::DeleteShareGroupState(
                DeleteShareGroupStateResponse::default().with_results(state_results!(
                    r,
                    o::DeleteStateResult,
                    |p| o::PartitionResult::default()
                        .with_partition(p.partition)
                        .with_error_code(code)
                )),
            )
        }
        RequestKind::ReadShareGroupStateSummary(r) => {
            use read_share_group_state_summary_response as o;
            ResponseKind::ReadShareGroupStateSummary(
                ReadShareGroupStateSummaryResponse::default().with_results(state_results!(
                    r,
                    o::ReadStateSummaryResult,
                    |p| o::PartitionResult::default()
                        .with_partition(p.partition)
                        .with_error_code(code)
                        .with_state_epoch(-1)
                        .with_leader_epoch(-1)
                        .with_start_offset(-1)
                )),
            )
        }
        _ => return None,
    })
}

/// Whether `req` is one of the share coordinator's state RPCs (83–87).
pub(super) fn is_state_rpc(req: &RequestKind) -> bool {
    matches!(
        req,
        RequestKind::InitializeShareGroupState(_)
            | RequestKind::ReadShareGroupState(_)
            | RequestKind::WriteShareGroupState(_)
            | RequestKind::DeleteShareGroupState(_)
            | RequestKind::ReadShareGroupStateSummary(_)
    )
}
