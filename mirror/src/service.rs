//! The mirror APIs on the wire: decodes a mirror request frame, applies it to the
//! [`MirrorCoordinator`], and encodes the response frame. Synchronous and runtime-agnostic;
//! the broker plugs it into its `ExtensionApis` (one instance, behind the broker's own
//! serialization, e.g. on the control thread or in a mutex).
//!
//! - `mirror.version` gating: at level 0 every mirror API answers UNSUPPORTED_VERSION.
//! - Version != 0 or an undecodable body answers UNSUPPORTED_VERSION / INVALID_REQUEST with
//!   the request's correlation id (the connection stays usable).
//! - AddTopicsToMirror records names and patterns; the metadata sync creates the topics (same
//!   name, id, partition count) and calls `materialize_partition`. With `validate_only`
//!   nothing is changed.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use kmirror_control::mirror::{MirrorCoordinator, MirrorHost, PartitionState, TopicOpError};
use kmirror_types::TopicPartition;

use crate::api::*;
use crate::keys::{self, api, error as code};

/// Live per-partition numbers for DescribeMirrors (from the fetchers; -1 when unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LivePartition {
    pub source_offset: i64,
    pub destination_offset: i64,
    pub lag: i64,
    pub lag_ms: i64,
    /// Offsets the source deleted before they were mirrored (summed), and the latest such
    /// gap `[lost_from, lost_to)` (-1 when none).
    pub lost_records: i64,
    pub lost_from: i64,
    pub lost_to: i64,
}

impl crate::fetcher::FetcherStatus {
    /// DescribeMirrors numbers from a fetcher's status. The source offset is the source's last
    /// stable offset (what read_committed mirroring can reach; equal to the high watermark
    /// unless a transaction is open), so `lag = source_offset - destination_offset` holds.
    pub fn live(&self, now_ms: i64) -> LivePartition {
        LivePartition {
            source_offset: self.source_last_stable_offset,
            destination_offset: self.destination_log_end_offset,
            lag: self.lag(),
            lag_ms: if self.lag() < 0 {
                -1
            } else {
                self.lag_ms(now_ms)
            },
            lost_records: 0,
            lost_from: -1,
            lost_to: -1,
        }
    }
}

/// What DescribeMirrors needs beyond the coordinator's durable state.
pub trait MirrorLiveStatus {
    fn live(&self, tp: &TopicPartition, now_ms: i64) -> Option<LivePartition>;
    /// The engine core owning `tp` on this broker, when known.
    fn core(&self, _tp: &TopicPartition) -> Option<usize> {
        None
    }
    /// Why the mirror's last metadata sync round failed (source unreachable, authentication
    /// refused), while it keeps failing; None once a round succeeds.
    fn sync_error(&self, mirror: &str) -> Option<String> {
        let _ = mirror;
        None
    }
    /// Since when (epoch ms) the mirror's rounds with the source have been failing; None
    /// while they succeed.
    fn source_unavailable_since(&self, mirror: &str) -> Option<i64> {
        let _ = mirror;
        None
    }
    /// The source entries the mirror's last ACL and quota sync rounds left to another owner.
    fn sync_clashes(&self, mirror: &str) -> Vec<String> {
        let _ = mirror;
        Vec::new()
    }
}

/// Kafka code and message for a per-topic failure.
pub(crate) fn topic_op_error(e: &TopicOpError) -> (i16, String) {
    let c = match e {
        TopicOpError::Mirror(m) => keys::mirror_error_code(m),
        TopicOpError::Refused { refusal, .. } => keys::state_refusal_code(*refusal),
        TopicOpError::UnknownTopic(_) => code::UNKNOWN_TOPIC_OR_PARTITION,
        TopicOpError::Host { .. } => code::UNKNOWN_SERVER_ERROR,
        _ => code::UNKNOWN_SERVER_ERROR,
    };
    (c, e.to_string())
}

/// The mirror API endpoint.
pub struct MirrorService {
    coordinator: MirrorCoordinator,
    feature_level: i16,
    /// The broker's engine cores, for checking `mirror.core.pins` (None = not checked).
    cores: Option<usize>,
}

impl MirrorService {
    pub fn new(coordinator: MirrorCoordinator, feature_level: i16) -> Self {
        MirrorService {
            coordinator,
            feature_level,
            cores: None,
        }
    }

    /// The number of engine cores: a pin to a core beyond it is refused (INVALID_CONFIG).
    pub fn set_cores(&mut self, cores: usize) {
        self.cores = Some(cores);
    }

    pub fn coordinator(&self) -> &MirrorCoordinator {
        &self.coordinator
    }

    pub fn coordinator_mut(&mut self) -> &mut MirrorCoordinator {
        &mut self.coordinator
    }

    /// Change `mirror.version` at runtime (UpdateFeatures).
    pub fn set_feature_level(&mut self, level: i16) {
        self.feature_level = level;
    }

    pub fn feature_level(&self) -> i16 {
        self.feature_level
    }

    /// (key, min, max) for ApiVersions: every mirror API, version 0 only.
    pub fn versions() -> Vec<(i16, i16, i16)> {
        (api::CREATE_MIRROR..=api::BUMP_LEADER_EPOCHS)
            .map(|k| (k, 0, 0))
            .collect()
    }

    /// Handle one request frame (header included, no length prefix). Returns the response
    /// frame (header included, no length prefix), or None if the frame is not a mirror API.
    pub fn handle_frame<H: MirrorHost + MirrorLiveStatus>(
        &mut self,
        frame: Bytes,
        host: &mut H,
        now_ms: i64,
    ) -> Option<Bytes> {
        let mut body = frame;
        let header = read_request_header_v2(&mut body).ok()?;
        if !api::is_mirror_api(header.api_key) {
            return None;
        }
        let key = header.api_key;
        let resp = if let Some(c) = keys::feature::gate(self.feature_level) {
            error_response_body(key, c, Some(code::default_message(c)))
        } else if header.api_version != 0 {
            error_response_body(
                key,
                code::UNSUPPORTED_VERSION,
                Some(&format!(
                    "{} supports version 0 only",
                    api::name(key).unwrap_or("mirror API")
                )),
            )
        } else {
            match self.dispatch(key, body, host, now_ms) {
                Ok(b) => Some(b),
                Err(e) => error_response_body(key, code::INVALID_REQUEST, Some(&e.to_string())),
            }
        }?;
        let mut out = BytesMut::with_capacity(resp.len() + 8);
        write_response_header_v1(&mut out, header.correlation_id);
        out.extend_from_slice(&resp);
        Some(out.freeze())
    }

    /// A RemoveTopicsFromMirror that asks to wait for sync (`wait_for_sync_ms` >= 0), decoded;
    /// None for anything else (which `handle_frame` answers at once).
    pub fn sync_wait(&self, frame: &Bytes) -> Option<RemoveTopicsFromMirrorRequest> {
        let mut body = frame.clone();
        let header = read_request_header_v2(&mut body).ok()?;
        if header.api_key != api::REMOVE_TOPICS_FROM_MIRROR || header.api_version != 0 {
            return None;
        }
        let r: RemoveTopicsFromMirrorRequest =
            decode_body("RemoveTopicsFromMirror", 0, body).ok()?;
        (r.wait_for_sync_ms >= 0).then_some(r)
    }

    /// The partitions a RemoveTopicsFromMirror would fail over: those not yet STOPPED of its
    /// named topics and of the mirror's topics its patterns match.
    pub fn remove_targets(
        &self,
        r: &RemoveTopicsFromMirrorRequest,
    ) -> Result<Vec<TopicPartition>, kmirror_control::mirror::MirrorError> {
        let names: Vec<String> = r.topics.iter().map(|t| t.topic_name.clone()).collect();
        let chosen = kmirror_control::mirror::TopicFilter::new(&names, &r.patterns, &[])?;
        Ok(self
            .coordinator
            .store()
            .partitions_of(&r.mirror_name)
            .filter(|(tp, e)| {
                e.state != PartitionState::Stopped && chosen.matches_any_name(&tp.topic)
            })
            .map(|(tp, _)| tp.clone())
            .collect())
    }

    fn dispatch<H: MirrorHost + MirrorLiveStatus>(
        &mut self,
        key: i16,
        body: Bytes,
        host: &mut H,
        now_ms: i64,
    ) -> Result<BytesMut, CodecError> {
        Ok(match key {
            api::CREATE_MIRROR => {
                let r: CreateMirrorRequest = decode_body("CreateMirror", 0, body)?;
                encode_body(&self.create_mirror(r))
            }
            api::ADD_TOPICS_TO_MIRROR => {
                let r: AddTopicsToMirrorRequest = decode_body("AddTopicsToMirror", 0, body)?;
                encode_body(&self.add_topics(r, host))
            }
            api::REMOVE_TOPICS_FROM_MIRROR => {
                let r: RemoveTopicsFromMirrorRequest =
                    decode_body("RemoveTopicsFromMirror", 0, body)?;
                let topics: Vec<String> = r.topics.into_iter().map(|t| t.topic_name).collect();
                // Patterns first: an invalid one refuses the request before anything fails over.
                let mut results = Vec::new();
                if !r.patterns.is_empty() {
                    match self
                        .coordinator
                        .remove_topic_patterns(&r.mirror_name, &r.patterns, host)
                    {
                        Ok(done) => results = done,
                        Err(e) => {
                            return Ok(encode_body(&MirrorTopicsResponse {
                                mirror_name: r.mirror_name,
                                error_code: keys::mirror_error_code(&e),
                                error_message: Some(e.to_string()),
                                ..Default::default()
                            }));
                        }
                    }
                }
                let named: Vec<String> = topics
                    .into_iter()
                    .filter(|t| !results.iter().any(|(done, _)| done == t))
                    .collect();
                results.extend(self.coordinator.remove_topics(&r.mirror_name, &named, host));
                let mut resp = topics_response(&r.mirror_name, results);
                // Where each failed-over partition's log ends now.
                for t in resp.topics.iter_mut().filter(|t| t.error_code == 0) {
                    t.stopped_at = self
                        .coordinator
                        .store()
                        .partitions()
                        .filter(|(tp, _)| tp.topic == t.name)
                        .map(|(tp, _)| PartitionOffset {
                            partition_index: tp.partition,
                            offset: host.live(tp, now_ms).map_or(-1, |l| l.destination_offset),
                            ..Default::default()
                        })
                        .collect();
                }
                encode_body(&resp)
            }
            api::PAUSE_MIRROR_TOPICS => {
                let r: PauseMirrorTopicsRequest = decode_body("PauseMirrorTopics", 0, body)?;
                let topics: Vec<String> = r.0.topics.into_iter().map(|t| t.topic_name).collect();
                let results = self
                    .coordinator
                    .pause_topics(&r.0.mirror_name, &topics, host);
                encode_body(&topics_response(&r.0.mirror_name, results))
            }
            api::RESUME_MIRROR_TOPICS => {
                let r: ResumeMirrorTopicsRequest = decode_body("ResumeMirrorTopics", 0, body)?;
                let topics: Vec<String> = r.0.topics.into_iter().map(|t| t.topic_name).collect();
                let results = self
                    .coordinator
                    .resume_topics(&r.0.mirror_name, &topics, host);
                encode_body(&topics_response(&r.0.mirror_name, results))
            }
            api::LIST_MIRRORS => {
                let _: ListMirrorsRequest = decode_body("ListMirrors", 0, body)?;
                encode_body(&self.list_mirrors(host))
            }
            api::DESCRIBE_MIRRORS => {
                let r: DescribeMirrorsRequest = decode_body("DescribeMirrors", 0, body)?;
                encode_body(&self.describe(r, host, now_ms))
            }
            api::DELETE_MIRROR => {
                let r: DeleteMirrorRequest = decode_body("DeleteMirror", 0, body)?;
                let resp = match self.coordinator.delete_mirror(&r.mirror_name) {
                    Ok(()) => SimpleMirrorResponse::default(),
                    Err(e) => SimpleMirrorResponse {
                        error_code: keys::mirror_error_code(&e),
                        error_message: Some(e.to_string()),
                        ..Default::default()
                    },
                };
                encode_body(&resp)
            }
            api::LAST_MIRRORED_EPOCHS => {
                let r: LastMirroredEpochsRequest = decode_body("LastMirroredEpochs", 0, body)?;
                encode_body(&self.last_mirrored_epochs(r, host))
            }
            api::READ_MIRROR_STATES => {
                let r: ReadMirrorStatesRequest = decode_body("ReadMirrorStates", 0, body)?;
                encode_body(&self.read_mirror_states(r))
            }
            api::WRITE_MIRROR_STATES => {
                let r: WriteMirrorStatesRequest = decode_body("WriteMirrorStates", 0, body)?;
                encode_body(&self.write_mirror_states(r))
            }
            // BumpLeaderEpochs is answered by the host before this (it proposes epochs).
            _ => error_response_body(
                key,
                code::INVALID_REQUEST,
                Some("inter-broker mirror API not served here"),
            )
            .expect("mirror key"),
        })
    }

    fn create_mirror(&mut self, r: CreateMirrorRequest) -> SimpleMirrorResponse {
        if r.alter {
            return self.alter_mirror(r);
        }
        let settings: BTreeMap<String, String> = r
            .configs
            .into_iter()
            .filter_map(|c| c.value.map(|v| (c.name, v)))
            .collect();
        // The source connection settings are checked here (files readable, credentials
        // complete), not at the first fetch: a mistake is an error to the operator.
        if let Err(e) =
            check_client_settings(&settings).and_then(|_| check_cores(&settings, self.cores))
        {
            return SimpleMirrorResponse {
                error_code: code::INVALID_CONFIG,
                error_message: Some(e),
                ..Default::default()
            };
        }
        match self.coordinator.create_mirror(&r.mirror_name, settings) {
            Ok(()) => SimpleMirrorResponse::default(),
            Err(e) => SimpleMirrorResponse {
                error_code: keys::mirror_error_code(&e),
                error_message: Some(e.to_string()),
                ..Default::default()
            },
        }
    }

    /// CreateMirror with kmirror's `alter` tag: merge the configs into an existing mirror.
    fn alter_mirror(&mut self, r: CreateMirrorRequest) -> SimpleMirrorResponse {
        let changes: BTreeMap<String, Option<String>> =
            r.configs.into_iter().map(|c| (c.name, c.value)).collect();
        let fail = |code: i16, msg: String| SimpleMirrorResponse {
            error_code: code,
            error_message: Some(msg),
            ..Default::default()
        };
        let Some(def) = self.coordinator.store().mirror(&r.mirror_name) else {
            return fail(
                code::UNKNOWN_MIRROR,
                format!("mirror '{}' does not exist", r.mirror_name),
            );
        };
        let mut merged = def.settings.clone();
        for (k, v) in &changes {
            match v {
                Some(v) => merged.insert(k.clone(), v.clone()),
                None => merged.remove(k),
            };
        }
        if let Err(e) =
            check_client_settings(&merged).and_then(|_| check_cores(&merged, self.cores))
        {
            return fail(code::INVALID_CONFIG, e);
        }
        match self.coordinator.alter_mirror(&r.mirror_name, changes) {
            Ok(()) => SimpleMirrorResponse::default(),
            Err(e) => fail(keys::mirror_error_code(&e), e.to_string()),
        }
    }

    fn add_topics<H: MirrorHost>(
        &mut self,
        r: AddTopicsToMirrorRequest,
        host: &mut H,
    ) -> MirrorTopicsResponse {
        let names: Vec<String> = r.topics.iter().map(|t| t.topic_name.clone()).collect();
        if r.validate_only {
            // Dry run: report conflicts, change nothing. (The truncation plan of a failback is
            // computed by the preparation step, which needs the source.)
            let mut resp = MirrorTopicsResponse {
                mirror_name: r.mirror_name.clone(),
                ..Default::default()
            };
            if self.coordinator.store().mirror(&r.mirror_name).is_none() {
                resp.error_code = code::UNKNOWN_MIRROR;
                resp.error_message = Some(format!("mirror '{}' does not exist", r.mirror_name));
                return resp;
            }
            resp.topics = names
                .into_iter()
                .map(|t| match self.coordinator.owner_of(&t) {
                    Some(m) => TopicResult {
                        error_code: code::TOPIC_ALREADY_IN_MIRROR,
                        error_message: Some(format!("topic '{t}' is mirrored by '{m}'")),
                        name: t,
                        ..Default::default()
                    },
                    None => TopicResult {
                        name: t,
                        ..Default::default()
                    },
                })
                .collect();
            return resp;
        }
        if r.start_timestamp != kmirror_control::mirror::definition::START_EARLIEST {
            let starts: Vec<String> = names.iter().chain(&r.include_patterns).cloned().collect();
            if let Err(e) =
                self.coordinator
                    .set_start_positions(&r.mirror_name, &starts, r.start_timestamp)
            {
                return MirrorTopicsResponse {
                    mirror_name: r.mirror_name,
                    error_code: keys::mirror_error_code(&e),
                    error_message: Some(e.to_string()),
                    ..Default::default()
                };
            }
        }
        match self.coordinator.add_topics(
            &r.mirror_name,
            &names,
            &r.include_patterns,
            &r.exclude_patterns,
            host,
        ) {
            Ok(results) => topics_response(&r.mirror_name, results),
            Err(e) => MirrorTopicsResponse {
                mirror_name: r.mirror_name,
                error_code: keys::mirror_error_code(&e),
                error_message: Some(e.to_string()),
                ..Default::default()
            },
        }
    }

    /// `mirror`'s health and, when DEGRADED, its FAILED partitions.
    pub fn link_state<H: MirrorLiveStatus>(
        &self,
        mirror: &str,
        host: &H,
    ) -> (kmirror_control::mirror::LinkState, Vec<String>) {
        let parts: Vec<(&TopicPartition, PartitionState)> = self
            .coordinator
            .store()
            .partitions_of(mirror)
            .map(|(tp, e)| (tp, e.state))
            .collect();
        let state = kmirror_control::mirror::LinkState::of(
            parts.iter().map(|(_, s)| *s),
            host.source_unavailable_since(mirror).is_some(),
        );
        let failed = parts
            .iter()
            .filter(|(_, s)| *s == PartitionState::Failed)
            .map(|(tp, _)| tp.to_string())
            .collect();
        (state, failed)
    }

    fn list_mirrors<H: MirrorLiveStatus>(&self, host: &H) -> ListMirrorsResponse {
        ListMirrorsResponse {
            mirrors: self
                .coordinator
                .mirrors()
                .map(|m| ListedMirror {
                    mirror_name: m.name.clone(),
                    source_bootstrap: m.source_bootstrap().to_owned(),
                    source_cluster_id: m.source_cluster_id.clone(),
                    topic_count: self.coordinator.topic_count(&m.name) as i32,
                    link_state: Some(self.link_state(&m.name, host).0.as_str().to_owned()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn describe<H: MirrorLiveStatus>(
        &self,
        r: DescribeMirrorsRequest,
        host: &H,
        now_ms: i64,
    ) -> DescribeMirrorsResponse {
        let names: Vec<String> = if r.mirror_names.is_empty() {
            self.coordinator.mirrors().map(|m| m.name.clone()).collect()
        } else {
            r.mirror_names
        };
        let mirrors = names
            .into_iter()
            .map(|name| {
                let Some(def) = self.coordinator.store().mirror(&name) else {
                    return DescribedMirror {
                        error_code: code::UNKNOWN_MIRROR,
                        mirror_name: name,
                        authorized_operations: i32::MIN,
                        ..Default::default()
                    };
                };
                let (link, failed_partitions) = self.link_state(&name, host);
                let mut topics: Vec<DescribedTopic> = Vec::new();
                for p in self.coordinator.describe(&name) {
                    let tp = TopicPartition::new(p.topic.clone(), p.partition);
                    let live = host.live(&tp, now_ms).unwrap_or(LivePartition {
                        source_offset: -1,
                        destination_offset: -1,
                        lag: -1,
                        lag_ms: -1,
                        lost_records: 0,
                        lost_from: -1,
                        lost_to: -1,
                    });
                    let detail = PartitionDetail {
                        partition_index: p.partition,
                        source_offset: live.source_offset,
                        destination_offset: live.destination_offset,
                        lag: live.lag,
                        state: p.state.as_str().to_owned(),
                        last_mirror_epoch: p.last_mirrored_epoch.unwrap_or(-1),
                        lag_ms: live.lag_ms,
                        failure_reason: p.reason.clone(),
                        lost_records: live.lost_records,
                        lost_from: live.lost_from,
                        lost_to: live.lost_to,
                        core: host.core(&tp).map_or(-1, |c| c as i32),
                        ..Default::default()
                    };
                    match topics.iter_mut().find(|t| t.topic_name == p.topic) {
                        Some(t) => t.partitions.push(detail),
                        None => topics.push(DescribedTopic {
                            topic_name: p.topic,
                            partitions: vec![detail],
                            ..Default::default()
                        }),
                    }
                }
                DescribedMirror {
                    mirror_name: name.clone(),
                    authorized_operations: i32::MIN,
                    topics,
                    source_bootstrap: Some(def.source_bootstrap().to_owned()),
                    configs: redacted_settings(&def.settings),
                    sync_error: host.sync_error(&name),
                    sync_clashes: host.sync_clashes(&name),
                    link_state: Some(link.as_str().to_owned()),
                    source_unavailable_since_ms: host.source_unavailable_since(&name).unwrap_or(-1),
                    failed_partitions,
                    ..Default::default()
                }
            })
            .collect();
        DescribeMirrorsResponse {
            mirrors,
            ..Default::default()
        }
    }

    /// ReadMirrorStates (inter-broker): each asked partition's state and last mirrored
    /// offset from the store (every partition of the mirror when no topic is named; topic
    /// names only when `need_partition_states` is false).
    fn read_mirror_states(&self, r: ReadMirrorStatesRequest) -> ReadMirrorStatesResponse {
        let store = self.coordinator.store();
        if store.mirror(&r.mirror_name).is_none() {
            return ReadMirrorStatesResponse {
                error_code: code::UNKNOWN_MIRROR,
                error_message: Some(format!("unknown mirror {}", r.mirror_name)),
                ..Default::default()
            };
        }
        let part = |tp: &TopicPartition| {
            let e = store.partition(tp).filter(|e| e.mirror == r.mirror_name);
            MirrorStatePartition {
                partition_index: tp.partition,
                last_mirrored_offset: e.and_then(|e| e.last_mirrored_offset).unwrap_or(-1),
                state: e.map_or(-1, |e| e.state.code()),
                error_code: if e.is_some() {
                    code::NONE
                } else {
                    code::UNKNOWN_TOPIC_OR_PARTITION
                },
                ..Default::default()
            }
        };
        let mut topics: BTreeMap<String, Vec<MirrorStatePartition>> = BTreeMap::new();
        if r.topics.is_empty() {
            for (tp, _) in store.partitions_of(&r.mirror_name) {
                topics.entry(tp.topic.clone()).or_default().push(part(tp));
            }
        } else {
            for t in &r.topics {
                let parts = topics.entry(t.name.clone()).or_default();
                for p in &t.partitions {
                    parts.push(part(&TopicPartition::new(
                        t.name.clone(),
                        p.partition_index,
                    )));
                }
            }
        }
        ReadMirrorStatesResponse {
            topics: topics
                .into_iter()
                .map(|(name, partitions)| MirrorStateTopic {
                    name,
                    partitions: if r.need_partition_states {
                        partitions
                    } else {
                        Vec::new()
                    },
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    /// WriteMirrorStates (inter-broker): each partition's state and last mirrored offset
    /// written through the store (on the Raft log in a cluster, at the seat's term).
    /// RemovedTopics drops the stored states of each named topic once it is STOPPED
    /// (failed over); a topic still mirrored keeps them (INVALID_REQUEST), one the mirror
    /// does not own is TOPIC_NOT_IN_MIRROR.
    fn write_mirror_states(&mut self, r: WriteMirrorStatesRequest) -> WriteMirrorStatesResponse {
        use kmirror_control::mirror::PartitionState;
        if self.coordinator.store().mirror(&r.mirror_name).is_none() {
            return WriteMirrorStatesResponse {
                error_code: code::UNKNOWN_MIRROR,
                error_message: Some(format!("unknown mirror {}", r.mirror_name)),
                ..Default::default()
            };
        }
        let mut topics = Vec::new();
        for t in r.topics_updated {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let tp = TopicPartition::new(t.name.clone(), p.partition_index);
                    let error_code = match PartitionState::from_code(p.state) {
                        None => code::INVALID_REQUEST,
                        Some(state) => match self.coordinator.write_state(
                            &tp,
                            &r.mirror_name,
                            state,
                            p.last_mirrored_offset,
                        ) {
                            Ok(()) => code::NONE,
                            Err(e) => keys::mirror_error_code(&e),
                        },
                    };
                    PartitionError {
                        partition_index: p.partition_index,
                        error_code,
                        ..Default::default()
                    }
                })
                .collect();
            topics.push(TopicPartitionErrors {
                topic_name: t.name,
                partitions,
                ..Default::default()
            });
        }
        // A removed topic's outcome is one entry on partition -1 (the request names no
        // partitions for it).
        for name in r.removed_topics {
            let error_code = match self.coordinator.remove_topic_states(&r.mirror_name, &name) {
                Ok(()) => code::NONE,
                Err(e) => keys::mirror_error_code(&e),
            };
            topics.push(TopicPartitionErrors {
                topic_name: name,
                partitions: vec![PartitionError {
                    partition_index: -1,
                    error_code,
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
        WriteMirrorStatesResponse {
            topics,
            ..Default::default()
        }
    }

    fn last_mirrored_epochs<H: MirrorHost>(
        &self,
        r: LastMirroredEpochsRequest,
        host: &H,
    ) -> LastMirroredEpochsResponse {
        LastMirroredEpochsResponse {
            topics: r
                .topics
                .into_iter()
                .map(|t| {
                    let exists = host.local_partition_count(&t.name);
                    LmeTopic {
                        partitions: t
                            .partitions
                            .iter()
                            .map(|p| {
                                let tp = TopicPartition::new(t.name.clone(), p.partition_index);
                                let known = exists.is_some_and(|n| p.partition_index < n);
                                LmePartition {
                                    partition_index: p.partition_index,
                                    last_mirrored_epoch: self
                                        .coordinator
                                        .last_mirrored_epoch(&tp)
                                        .unwrap_or(-1),
                                    error_code: if known {
                                        code::NONE
                                    } else {
                                        code::UNKNOWN_TOPIC_OR_PARTITION
                                    },
                                    ..Default::default()
                                }
                            })
                            .collect(),
                        name: t.name,
                        ..Default::default()
                    }
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// A ready-made [`kmirror_net::broker::ExtensionApis`] over a [`MirrorService`] and the broker's
/// [`MirrorHost`] + [`MirrorLiveStatus`] implementation: the lead only writes the host. Requests
/// are handled one at a time under a mutex (admin traffic; each may fsync `__mirror_state`).
/// The broker uses [`crate::MirrorBroker`]; this one serves the service's unit tests.
#[cfg(test)]
pub(crate) struct MirrorExtension<H> {
    inner: std::sync::Mutex<(MirrorService, H)>,
}

#[cfg(test)]
impl<H: MirrorHost + MirrorLiveStatus + Send + 'static> MirrorExtension<H> {
    pub(crate) fn new(service: MirrorService, host: H) -> Self {
        MirrorExtension {
            inner: std::sync::Mutex::new((service, host)),
        }
    }

    /// Run `f` with the service and host (for the control loops: sync, fetch events).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut MirrorService, &mut H) -> R) -> R {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (svc, host) = &mut *g;
        f(svc, host)
    }
}

#[cfg(test)]
impl<H: MirrorHost + MirrorLiveStatus + Send + 'static> kmirror_net::broker::ExtensionApis
    for MirrorExtension<H>
{
    fn versions(&self) -> Vec<(i16, i16, i16)> {
        MirrorService::versions()
    }

    fn handles(&self, api_key: i16) -> bool {
        api::is_mirror_api(api_key)
    }

    fn handle(
        &self,
        _session: &kmirror_net::session::Session,
        _api_key: i16,
        frame: Bytes,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Bytes>>>> {
        let now = crate::fetcher::now_ms();
        let out = self.with(|svc, host| svc.handle_frame(frame, host, now));
        Box::pin(std::future::ready(out))
    }
}

fn topics_response(
    mirror: &str,
    results: Vec<(String, Result<(), TopicOpError>)>,
) -> MirrorTopicsResponse {
    MirrorTopicsResponse {
        mirror_name: mirror.to_owned(),
        topics: results
            .into_iter()
            .map(|(name, r)| match r {
                Ok(()) => TopicResult {
                    name,
                    ..Default::default()
                },
                Err(e) => {
                    let (c, m) = topic_op_error(&e);
                    TopicResult {
                        name,
                        error_code: c,
                        error_message: Some(m),
                        ..Default::default()
                    }
                }
            })
            .collect(),
        ..Default::default()
    }
}

/// Mirror settings as DescribeMirrors shows them: secret values never leave the broker.
fn redacted_settings(settings: &BTreeMap<String, String>) -> Vec<MirrorConfig> {
    settings
        .iter()
        .map(|(k, v)| MirrorConfig {
            name: k.clone(),
            value: Some(if crate::client::security::is_secret_key(k) {
                HIDDEN.to_owned()
            } else {
                v.clone()
            }),
            ..Default::default()
        })
        .collect()
}

/// What DescribeMirrors shows instead of a secret.
pub(crate) const HIDDEN: &str = "[hidden]";

/// The security part of a mirror's settings, checked as the source client will use it.
fn check_client_settings(settings: &BTreeMap<String, String>) -> Result<(), String> {
    let client: BTreeMap<String, String> = settings
        .iter()
        .filter(|(k, _)| !k.starts_with("mirror."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    crate::client::security::ClientSecurity::from_properties(&client)
        .map(|_| ())
        .map_err(|e| format!("invalid mirror setting {e}"))
}

/// `mirror.core.*` as the broker will apply them: well-formed, and every pinned core exists.
fn check_cores(settings: &BTreeMap<String, String>, cores: Option<usize>) -> Result<(), String> {
    use kmirror_control::mirror::definition::settings::{CORE_ASSIGNMENT, CORE_PINS};
    let placement = kmirror_control::mirror::CorePlacement::parse(
        settings.get(CORE_ASSIGNMENT).map(String::as_str),
        settings.get(CORE_PINS).map(String::as_str),
    )
    .map_err(|e| e.to_string())?;
    match (placement.max_core(), cores) {
        (Some(max), Some(cores)) if max >= cores => Err(format!(
            "invalid mirror setting {CORE_PINS}: core {max} does not exist (this broker has {cores} \
             core{}: 0..={})",
            if cores == 1 { "" } else { "s" },
            cores.saturating_sub(1)
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_control::mirror::{HostError, MirrorDefinition, MirrorStateStore};
    use kmirror_types::{LeaderEpoch, Offset};
    use std::collections::BTreeMap;

    #[derive(Default)]
    struct Host {
        topics: BTreeMap<String, i32>,
        epoch: i32,
        fetchers: Vec<TopicPartition>,
    }

    impl MirrorHost for Host {
        fn local_partition_count(&self, topic: &str) -> Option<i32> {
            self.topics.get(topic).copied()
        }
        fn start_fetcher(&mut self, _m: &MirrorDefinition, tp: &TopicPartition) {
            self.fetchers.push(tp.clone());
        }
        fn stop_fetcher(&mut self, tp: &TopicPartition) -> Result<(), HostError> {
            self.fetchers.retain(|x| x != tp);
            Ok(())
        }
        fn leader_epoch(&self, _tp: &TopicPartition) -> Result<LeaderEpoch, HostError> {
            Ok(LeaderEpoch(self.epoch))
        }
        fn bump_leader_epoch(&mut self, _tp: &TopicPartition) -> Result<LeaderEpoch, HostError> {
            self.epoch += 1;
            Ok(LeaderEpoch(self.epoch))
        }
        fn truncate_to_lso(&mut self, _tp: &TopicPartition) -> Result<Offset, HostError> {
            Ok(Offset(0))
        }
        fn ends_with_pid_reset(&self, _tp: &TopicPartition) -> Result<bool, HostError> {
            Ok(false)
        }
        fn write_pid_reset(&mut self, _tp: &TopicPartition) -> Result<(), HostError> {
            Ok(())
        }
    }

    impl MirrorLiveStatus for Host {
        fn live(&self, tp: &TopicPartition, now_ms: i64) -> Option<LivePartition> {
            (tp.partition == 0).then_some(LivePartition {
                source_offset: 10,
                destination_offset: 7,
                lag: 3,
                lag_ms: now_ms - 100,
                lost_records: 0,
                lost_from: -1,
                lost_to: -1,
            })
        }
    }

    /// Send one request through the service as the broker would, decode the response.
    fn call<R: MirrorRequest>(svc: &mut MirrorService, host: &mut Host, req: &R) -> R::Response {
        let frame = crate::client::encode_mirror_request(req, 77, "test");
        let resp = svc.handle_frame(frame, host, 1_000).expect("mirror api");
        crate::client::decode_mirror_response::<R>(resp, 77).expect("decodes")
    }

    fn service(dir: &std::path::Path, level: i16) -> MirrorService {
        MirrorService::new(
            MirrorCoordinator::new(MirrorStateStore::open(dir).unwrap()),
            level,
        )
    }

    fn create(name: &str) -> CreateMirrorRequest {
        CreateMirrorRequest {
            mirror_name: name.into(),
            configs: vec![MirrorConfig {
                name: "bootstrap.servers".into(),
                value: Some("127.0.0.1:9092".into()),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn mirror_version_zero_answers_unsupported_version_on_every_mirror_api() {
        let dir = tempfile::tempdir().unwrap();
        let mut svc = service(dir.path(), 0);
        let mut h = Host::default();
        assert_eq!(call(&mut svc, &mut h, &create("dr")).error_code, 35);
        assert_eq!(
            call(&mut svc, &mut h, &ListMirrorsRequest::default()).error_code,
            35
        );
        assert_eq!(
            call(&mut svc, &mut h, &DescribeMirrorsRequest::default()).error_code,
            35
        );
        assert_eq!(svc.coordinator().mirrors().count(), 0, "nothing created");
        svc.set_feature_level(1);
        assert_eq!(call(&mut svc, &mut h, &create("dr")).error_code, 0);
    }

    #[test]
    fn create_list_describe_delete_over_the_wire() {
        let dir = tempfile::tempdir().unwrap();
        let mut svc = service(dir.path(), 1);
        let mut h = Host::default();
        assert_eq!(call(&mut svc, &mut h, &create("dr")).error_code, 0);
        let dup = call(&mut svc, &mut h, &create("dr"));
        assert_eq!(dup.error_code, code::MIRROR_ALREADY_EXISTS);
        let bad = call(&mut svc, &mut h, &create("x.removed"));
        assert_eq!(bad.error_code, code::INVALID_MIRROR_NAME);

        h.topics.insert("orders".into(), 2);
        let add = call(
            &mut svc,
            &mut h,
            &AddTopicsToMirrorRequest {
                mirror_name: "dr".into(),
                topics: vec![StartTopic {
                    topic_name: "orders".into(),
                    num_partitions: -1,
                    ..Default::default()
                }],
                ..Default::default()
            },
        );
        assert_eq!(add.topics[0].error_code, 0, "{:?}", add.topics[0]);
        // The metadata sync (same topic id on both sides) materializes the partitions.
        for p in 0..2 {
            svc.coordinator_mut()
                .materialize_partition("dr", &TopicPartition::new("orders", p))
                .unwrap();
        }
        let list = call(&mut svc, &mut h, &ListMirrorsRequest::default());
        assert_eq!(list.mirrors[0].mirror_name, "dr");
        assert_eq!(list.mirrors[0].source_bootstrap, "127.0.0.1:9092");
        assert_eq!(list.mirrors[0].topic_count, 1);

        let d = call(&mut svc, &mut h, &DescribeMirrorsRequest::default());
        let parts = &d.mirrors[0].topics[0].partitions;
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].state, "PREPARING");
        assert_eq!((parts[0].lag, parts[0].lag_ms), (3, 900));
        assert_eq!(parts[1].lag, -1, "unknown live numbers are -1");

        let del = call(
            &mut svc,
            &mut h,
            &DeleteMirrorRequest {
                mirror_name: "dr".into(),
                ..Default::default()
            },
        );
        assert_eq!(del.error_code, code::MIRROR_NOT_EMPTY);

        let rm = call(
            &mut svc,
            &mut h,
            &RemoveTopicsFromMirrorRequest {
                mirror_name: "dr".into(),
                topics: vec![TopicName {
                    topic_name: "orders".into(),
                    ..Default::default()
                }],
                ..Default::default()
            },
        );
        assert_eq!(rm.topics[0].error_code, 0, "{:?}", rm.topics[0]);
        let lme = call(
            &mut svc,
            &mut h,
            &LastMirroredEpochsRequest {
                mirror_name: "whatever".into(),
                topics: vec![TopicPartitionsQuery {
                    name: "orders".into(),
                    partitions: vec![
                        PartitionIndex {
                            partition_index: 0,
                            ..Default::default()
                        },
                        PartitionIndex {
                            partition_index: 9,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            },
        );
        let p = &lme.topics[0].partitions;
        assert_eq!((p[0].last_mirrored_epoch, p[0].error_code), (0, 0));
        assert_eq!(p[1].error_code, code::UNKNOWN_TOPIC_OR_PARTITION);
        let del = call(
            &mut svc,
            &mut h,
            &DeleteMirrorRequest {
                mirror_name: "dr".into(),
                ..Default::default()
            },
        );
        assert_eq!(del.error_code, 0);
    }

    #[test]
    fn write_mirror_states_persists_state_and_offset_read_back_by_read_mirror_states() {
        use kmirror_control::mirror::PartitionState;
        let dir = tempfile::tempdir().unwrap();
        call(
            &mut service(dir.path(), 1),
            &mut Host::default(),
            &create("dr"),
        );
        let tp = TopicPartition::new("orders", 0);
        {
            let mut store = MirrorStateStore::open(dir.path()).unwrap();
            store
                .transition(&tp, "dr", PartitionState::Preparing, None)
                .unwrap();
        }
        let mut svc = service(dir.path(), 1);
        let mut h = Host::default();
        let write = |mirror: &str, topic: &str, state: i8| WriteMirrorStatesRequest {
            mirror_name: mirror.into(),
            topics_updated: vec![WriteStateTopic {
                name: topic.into(),
                partitions: vec![WriteStatePartition {
                    partition_index: 0,
                    last_mirrored_offset: 1234,
                    state,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mirroring = PartitionState::Mirroring.code();
        let r = call(&mut svc, &mut h, &write("dr", "orders", mirroring));
        assert_eq!((r.error_code, r.topics[0].partitions[0].error_code), (0, 0));
        let r = call(&mut svc, &mut h, &write("nope", "orders", mirroring));
        assert_eq!(r.error_code, code::UNKNOWN_MIRROR);
        let r = call(&mut svc, &mut h, &write("dr", "ghost", mirroring));
        assert_eq!(
            r.topics[0].partitions[0].error_code,
            code::UNKNOWN_TOPIC_OR_PARTITION
        );
        // MIRRORING -> PREPARING is not a transition the state machine has.
        let r = call(&mut svc, &mut h, &write("dr", "orders", 1));
        assert_eq!(r.topics[0].partitions[0].error_code, code::INVALID_REQUEST);
        let read = ReadMirrorStatesRequest {
            mirror_name: "dr".into(),
            need_partition_states: true,
            ..Default::default()
        };
        let r = call(&mut svc, &mut h, &read);
        let p = &r.topics[0].partitions[0];
        assert_eq!((p.state, p.last_mirrored_offset), (mirroring, 1234));
        // Written durably: a reopened store answers the same.
        let r = call(&mut service(dir.path(), 1), &mut h, &read);
        assert_eq!(r.topics[0].partitions[0].last_mirrored_offset, 1234);
        let names_only = ReadMirrorStatesRequest {
            need_partition_states: false,
            ..read
        };
        let r = call(&mut svc, &mut h, &names_only);
        assert_eq!(r.topics[0].name, "orders");
        assert!(r.topics[0].partitions.is_empty());
    }

    #[test]
    fn write_mirror_states_removed_topics_drop_stopped_states_only() {
        use kmirror_control::mirror::PartitionState;
        let dir = tempfile::tempdir().unwrap();
        call(
            &mut service(dir.path(), 1),
            &mut Host::default(),
            &create("dr"),
        );
        let tp = TopicPartition::new("orders", 0);
        {
            let mut store = MirrorStateStore::open(dir.path()).unwrap();
            for s in [PartitionState::Preparing, PartitionState::Mirroring] {
                store.transition(&tp, "dr", s, None).unwrap();
            }
        }
        let mut svc = service(dir.path(), 1);
        let mut h = Host::default();
        let remove = |topic: &str| WriteMirrorStatesRequest {
            mirror_name: "dr".into(),
            removed_topics: vec![topic.into()],
            ..Default::default()
        };
        let code_of = |r: &WriteMirrorStatesResponse| {
            let p = &r.topics[0].partitions[0];
            (r.error_code, p.partition_index, p.error_code)
        };
        let read = ReadMirrorStatesRequest {
            mirror_name: "dr".into(),
            need_partition_states: true,
            ..Default::default()
        };
        let r = call(&mut svc, &mut h, &remove("orders"));
        assert_eq!(
            code_of(&r),
            (0, -1, code::INVALID_REQUEST),
            "still mirrored"
        );
        assert_eq!(call(&mut svc, &mut h, &read).topics.len(), 1, "kept");
        let r = call(&mut svc, &mut h, &remove("ghost"));
        assert_eq!(code_of(&r), (0, -1, code::TOPIC_NOT_IN_MIRROR));
        {
            let store = svc.coordinator_mut();
            for s in [PartitionState::Stopping, PartitionState::Stopped] {
                store.write_state(&tp, "dr", s, 41).unwrap();
            }
        }
        let r = call(&mut svc, &mut h, &remove("orders"));
        assert_eq!(
            code_of(&r),
            (0, -1, code::NONE),
            "a stopped topic's state goes"
        );
        assert!(call(&mut svc, &mut h, &read).topics.is_empty());
        // Durably: a reopened store has no entry either.
        let r = call(&mut service(dir.path(), 1), &mut h, &read);
        assert!(r.topics.is_empty(), "{r:?}");
    }

    #[test]
    fn pause_errors_carry_seed_codes_per_topic() {
        let dir = tempfile::tempdir().unwrap();
        let mut svc = service(dir.path(), 1);
        let mut h = Host::default();
        call(&mut svc, &mut h, &create("dr"));
        let req = PauseMirrorTopicsRequest(PauseResumeTopics {
            mirror_name: "dr".into(),
            topics: vec![TopicRef {
                topic_name: "ghost".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let r = call(&mut svc, &mut h, &req);
        assert_eq!(r.topics[0].error_code, code::UNKNOWN_TOPIC_OR_PARTITION);
        let req = ResumeMirrorTopicsRequest(PauseResumeTopics {
            mirror_name: "nope".into(),
            topics: vec![TopicRef {
                topic_name: "ghost".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let r = call(&mut svc, &mut h, &req);
        assert_eq!(r.topics[0].error_code, code::UNKNOWN_MIRROR);
    }

    #[test]
    fn dry_run_add_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut svc = service(dir.path(), 1);
        let mut h = Host::default();
        call(&mut svc, &mut h, &create("dr"));
        h.topics.insert("orders".into(), 1);
        let r = call(
            &mut svc,
            &mut h,
            &AddTopicsToMirrorRequest {
                mirror_name: "dr".into(),
                topics: vec![StartTopic {
                    topic_name: "orders".into(),
                    ..Default::default()
                }],
                validate_only: true,
                ..Default::default()
            },
        );
        assert_eq!(r.topics[0].error_code, 0);
        assert_eq!(svc.coordinator().topic_count("dr"), 0);
        assert!(svc.coordinator().describe("dr").is_empty());
    }

    #[test]
    fn wrong_version_and_garbage_get_error_responses_with_the_correlation_id() {
        let dir = tempfile::tempdir().unwrap();
        let mut svc = service(dir.path(), 1);
        let mut h = Host::default();
        let mut w = BytesMut::new();
        write_request_header_v2(&mut w, api::LIST_MIRRORS, 3, 5, None);
        let resp = svc.handle_frame(w.freeze(), &mut h, 0).unwrap();
        let r = crate::client::decode_mirror_response::<ListMirrorsRequest>(resp, 5).unwrap();
        assert_eq!(r.error_code, code::UNSUPPORTED_VERSION);
        let mut w = BytesMut::new();
        write_request_header_v2(&mut w, api::CREATE_MIRROR, 0, 6, None);
        w.extend_from_slice(&[0xff, 0xff]);
        let resp = svc.handle_frame(w.freeze(), &mut h, 0).unwrap();
        let r = crate::client::decode_mirror_response::<CreateMirrorRequest>(resp, 6).unwrap();
        assert_eq!(r.error_code, code::INVALID_REQUEST);
        // Not a mirror API: not ours.
        let mut w = BytesMut::new();
        write_request_header_v2(&mut w, 3, 12, 7, None);
        assert!(svc.handle_frame(w.freeze(), &mut h, 0).is_none());
    }

    #[test]
    fn extension_adapter_serves_mirror_frames_for_the_broker() {
        use kmirror_net::broker::ExtensionApis;
        let dir = tempfile::tempdir().unwrap();
        let ext = MirrorExtension::new(service(dir.path(), 1), Host::default());
        assert!(ext.handles(api::CREATE_MIRROR) && !ext.handles(1));
        let frame = crate::client::encode_mirror_request(&create("dr"), 9, "t");
        let resp = futures_lite::future::block_on(ext.handle(
            &kmirror_net::session::Session::plaintext(None),
            api::CREATE_MIRROR,
            frame,
        ))
        .unwrap();
        let r = crate::client::decode_mirror_response::<CreateMirrorRequest>(resp, 9).unwrap();
        assert_eq!(r.error_code, 0);
        assert_eq!(ext.with(|s, _| s.coordinator().mirrors().count()), 1);
    }

    #[test]
    fn advertised_versions_cover_every_mirror_key() {
        let v = MirrorService::versions();
        for (k, _) in api::USER_FACING {
            assert!(v.contains(&(k, 0, 0)));
        }
    }
}
