//! Every API key, error code and feature name kmirror uses for Cluster Mirroring (KIP-1279).
//!
//! The KIP leaves keys and new error codes "TBD". We take the numbers of the upstream
//! prototype (public repositories `aiven/kafka` and its sibling `aiven/inkless`, files
//! `clients/src/main/resources/common/message/*Mirror*.json` and `Errors.java`) so that the
//! prototype's admin tooling can talk to kmirror. Where the prototype renamed an API we keep
//! the seed's meaning and name both (`AddTopicsToMirror` = `StartMirrorTopics`,
//! `RemoveTopicsFromMirror` = `StopMirrorTopics`). Codes the prototype does not define yet are
//! marked "kmirror-chosen"; they sit right after the prototype's last mirror code so that a
//! future upstream assignment is easy to adopt (change it here, nowhere else).
//!
//! Everything in this file is a plain constant: no other module may hard-code one of these
//! numbers.

/// Kafka's "no error".
pub const NONE: i16 = 0;

/// API keys of the mirror APIs. All are version 0 only and flexible from version 0 (so their
/// header is request header v2 / response header v1, with tagged fields).
pub mod api {
    /// CreateMirror: create a named link to a source cluster with its settings. Upstream key 94.
    pub const CREATE_MIRROR: i16 = 94;
    /// AddTopicsToMirror (upstream name StartMirrorTopics): attach topics (names or regexes) to a
    /// mirror; they go UNKNOWN/STOPPED -> PREPARING -> MIRRORING. Upstream key 95.
    pub const ADD_TOPICS_TO_MIRROR: i16 = 95;
    /// Same key, upstream's name.
    pub const START_MIRROR_TOPICS: i16 = ADD_TOPICS_TO_MIRROR;
    /// RemoveTopicsFromMirror (upstream name StopMirrorTopics): failover; topics go STOPPING ->
    /// STOPPED and become writable. Upstream key 96.
    pub const REMOVE_TOPICS_FROM_MIRROR: i16 = 96;
    /// Same key, upstream's name.
    pub const STOP_MIRROR_TOPICS: i16 = REMOVE_TOPICS_FROM_MIRROR;
    /// LastMirroredEpochs: a failing-back destination asks the cluster that took over for the
    /// last mirrored epoch (LME) of each partition. Upstream key 97 (seed 000 shows it too).
    pub const LAST_MIRRORED_EPOCHS: i16 = 97;
    /// ListMirrors: names, source bootstrap and topic count of every mirror. Upstream key 98.
    pub const LIST_MIRRORS: i16 = 98;
    /// DescribeMirrors: per-partition source/destination offsets, lag, state, LME. Upstream key 99.
    pub const DESCRIBE_MIRRORS: i16 = 99;
    /// ReadMirrorStates: inter-broker read of the mirror coordinator's partition states.
    /// Upstream key 100. kmirror runs one node per cluster today, so it only needs to answer it.
    pub const READ_MIRROR_STATES: i16 = 100;
    /// WriteMirrorStates: inter-broker write to the mirror coordinator. Upstream key 101.
    pub const WRITE_MIRROR_STATES: i16 = 101;
    /// PauseMirrorTopics: stop fetching for topics without failing over. Upstream key 102.
    pub const PAUSE_MIRROR_TOPICS: i16 = 102;
    /// ResumeMirrorTopics: resume paused topics. Upstream key 103.
    pub const RESUME_MIRROR_TOPICS: i16 = 103;
    /// DeleteMirror: delete an empty mirror (MIRROR_NOT_EMPTY otherwise). Upstream key 104.
    pub const DELETE_MIRROR: i16 = 104;
    /// BumpLeaderEpochs: inter-broker, raise destination epochs to at least the source's.
    /// Upstream key 105.
    pub const BUMP_LEADER_EPOCHS: i16 = 105;

    /// The mirror APIs a client may call, with their display names (seed names first).
    pub const USER_FACING: [(i16, &str); 9] = [
        (CREATE_MIRROR, "CreateMirror"),
        (ADD_TOPICS_TO_MIRROR, "AddTopicsToMirror"),
        (REMOVE_TOPICS_FROM_MIRROR, "RemoveTopicsFromMirror"),
        (LAST_MIRRORED_EPOCHS, "LastMirroredEpochs"),
        (LIST_MIRRORS, "ListMirrors"),
        (DESCRIBE_MIRRORS, "DescribeMirrors"),
        (PAUSE_MIRROR_TOPICS, "PauseMirrorTopics"),
        (RESUME_MIRROR_TOPICS, "ResumeMirrorTopics"),
        (DELETE_MIRROR, "DeleteMirror"),
    ];

    /// True for every key in 94..=105 (the mirror API block).
    pub fn is_mirror_api(key: i16) -> bool {
        (CREATE_MIRROR..=BUMP_LEADER_EPOCHS).contains(&key)
    }

    /// Display name of a mirror API key (seed name), if it is one.
    pub fn name(key: i16) -> Option<&'static str> {
        Some(match key {
            CREATE_MIRROR => "CreateMirror",
            ADD_TOPICS_TO_MIRROR => "AddTopicsToMirror",
            REMOVE_TOPICS_FROM_MIRROR => "RemoveTopicsFromMirror",
            LAST_MIRRORED_EPOCHS => "LastMirroredEpochs",
            LIST_MIRRORS => "ListMirrors",
            DESCRIBE_MIRRORS => "DescribeMirrors",
            READ_MIRROR_STATES => "ReadMirrorStates",
            WRITE_MIRROR_STATES => "WriteMirrorStates",
            PAUSE_MIRROR_TOPICS => "PauseMirrorTopics",
            RESUME_MIRROR_TOPICS => "ResumeMirrorTopics",
            DELETE_MIRROR => "DeleteMirror",
            BUMP_LEADER_EPOCHS => "BumpLeaderEpochs",
            _ => return None,
        })
    }
}

/// Error codes. Standard Kafka codes used by the mirror APIs and the mirror fetcher first,
/// then the mirror-specific ones.
pub mod error {
    // Standard Kafka codes (Errors.java), the ones the mirror paths produce or react to.
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const NONE: i16 = 0;
    /// Fetcher: the source log start moved past our fetch offset -> truncate fully, restart there.
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
    /// A batch failed its CRC or framing checks: fails that partition only.
    pub const CORRUPT_MESSAGE: i16 = 2;
    /// Topic missing on the destination (Remove/Pause/Resume) or on the source (fetcher).
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const LEADER_NOT_AVAILABLE: i16 = 5;
    /// Fetcher: the source leader moved -> refresh metadata, follow the new leader.
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    pub const REQUEST_TIMED_OUT: i16 = 7;
    pub const REPLICA_NOT_AVAILABLE: i16 = 9;
    pub const NETWORK_EXCEPTION: i16 = 13;
    /// The coordinator is loading its state (a new quorum leader not yet ready).
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    /// The mirror coordinator is not active (ReadMirrorStates, WriteMirrorStates, LastMirroredEpochs).
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    /// This broker is not the coordinator (it moved).
    pub const NOT_COORDINATOR: i16 = 16;
    pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
    /// The client may not run the mirror operation (coordinator RPCs).
    pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
    /// This broker is not the active controller (admin requests the controller serves).
    pub const NOT_CONTROLLER: i16 = 41;
    /// Cluster mirroring is disabled (`mirror.version=0`), answered on every mirror API.
    /// SaslHandshake: the broker does not enable the mechanism (source client).
    pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
    pub const ILLEGAL_SASL_STATE: i16 = 34;
    pub const UNSUPPORTED_VERSION: i16 = 35;
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    /// CreateMirror / AlterMirror: unusable source connection settings (security).
    pub const INVALID_CONFIG: i16 = 40;
    pub const INVALID_REQUEST: i16 = 42;
    /// DescribeAcls on a broker without an authorizer (the mirror's ACL sync then does nothing).
    pub const SECURITY_DISABLED: i16 = 54;
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
    /// SaslAuthenticate: wrong credentials (source client).
    pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
    /// Fetcher: our known source epoch is older than the source leader's -> learn it, retry.
    /// Fetch session (KIP-227): the broker no longer has our session -> full fetch.
    pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
    /// Fetch session (KIP-227): our session epoch is not the one expected -> full fetch.
    pub const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
    pub const FENCED_LEADER_EPOCH: i16 = 74;
    /// Fetcher: our known source epoch is newer than the source leader's -> refresh, retry.
    pub const UNKNOWN_LEADER_EPOCH: i16 = 75;
    pub const UNKNOWN_TOPIC_ID: i16 = 100;
    pub const INCONSISTENT_TOPIC_ID: i16 = 103;
    /// Fetcher: data below the fetch offset is only in tiered storage -> partition FAILED (seed 003).
    pub const OFFSET_MOVED_TO_TIERED_STORAGE: i16 = 109;
    pub const INVALID_REGULAR_EXPRESSION: i16 = 128;

    // Mirror codes from the upstream prototype's Errors.java (aiven/inkless, same lineage as
    // aiven/kafka's KIP-1279 branch).
    /// Produce / DeleteRecords / CreatePartitions / synced-config changes on a mirror topic.
    pub const READ_ONLY_TOPIC: i16 = 134;
    /// CreateMirror: name empty, too long, bad characters, or ends with `.removed`.
    pub const INVALID_MIRROR_NAME: i16 = 135;
    /// The mirror does not exist (or, seed wording, the topic is not assigned to any mirror).
    pub const UNKNOWN_MIRROR: i16 = 136;
    /// AddTopicsToMirror: the topic already belongs to a mirror.
    pub const TOPIC_ALREADY_IN_MIRROR: i16 = 137;
    /// Remove/Pause/Resume: the topic is not in the named mirror.
    pub const TOPIC_NOT_IN_MIRROR: i16 = 138;
    /// PauseMirrorTopics on a paused topic.
    pub const MIRROR_TOPIC_ALREADY_PAUSED: i16 = 139;
    /// ResumeMirrorTopics on a topic that is not paused.
    pub const MIRROR_TOPIC_NOT_PAUSED: i16 = 140;
    /// ResumeMirrorTopics (and Pause) on a topic being failed over.
    pub const MIRROR_TOPIC_BEING_REMOVED: i16 = 141;
    // kmirror-chosen: the seeds name these but the prototype has no number yet.
    /// DeleteMirror while the mirror still has active or non-removed topics. kmirror-chosen.
    pub const MIRROR_NOT_EMPTY: i16 = 142;
    /// Mirror-level authorization failure. kmirror-chosen.
    pub const MIRROR_AUTHORIZATION_FAILED: i16 = 143;
    /// CreateMirror with a name already in use. kmirror-chosen (the seeds reject it without a
    /// named code; a distinct code lets the CLI say what happened).
    pub const MIRROR_ALREADY_EXISTS: i16 = 144;

    /// Upper-case Kafka name of a code this file knows, for CLI messages and logs.
    pub fn name(code: i16) -> &'static str {
        match code {
            UNKNOWN_SERVER_ERROR => "UNKNOWN_SERVER_ERROR",
            NONE => "NONE",
            OFFSET_OUT_OF_RANGE => "OFFSET_OUT_OF_RANGE",
            CORRUPT_MESSAGE => "CORRUPT_MESSAGE",
            UNKNOWN_TOPIC_OR_PARTITION => "UNKNOWN_TOPIC_OR_PARTITION",
            LEADER_NOT_AVAILABLE => "LEADER_NOT_AVAILABLE",
            NOT_LEADER_OR_FOLLOWER => "NOT_LEADER_OR_FOLLOWER",
            REQUEST_TIMED_OUT => "REQUEST_TIMED_OUT",
            REPLICA_NOT_AVAILABLE => "REPLICA_NOT_AVAILABLE",
            NETWORK_EXCEPTION => "NETWORK_EXCEPTION",
            COORDINATOR_LOAD_IN_PROGRESS => "COORDINATOR_LOAD_IN_PROGRESS",
            COORDINATOR_NOT_AVAILABLE => "COORDINATOR_NOT_AVAILABLE",
            NOT_COORDINATOR => "NOT_COORDINATOR",
            NOT_CONTROLLER => "NOT_CONTROLLER",
            TOPIC_AUTHORIZATION_FAILED => "TOPIC_AUTHORIZATION_FAILED",
            GROUP_AUTHORIZATION_FAILED => "GROUP_AUTHORIZATION_FAILED",
            UNSUPPORTED_SASL_MECHANISM => "UNSUPPORTED_SASL_MECHANISM",
            ILLEGAL_SASL_STATE => "ILLEGAL_SASL_STATE",
            SASL_AUTHENTICATION_FAILED => "SASL_AUTHENTICATION_FAILED",
            CLUSTER_AUTHORIZATION_FAILED => "CLUSTER_AUTHORIZATION_FAILED",
            UNSUPPORTED_VERSION => "UNSUPPORTED_VERSION",
            TOPIC_ALREADY_EXISTS => "TOPIC_ALREADY_EXISTS",
            INVALID_CONFIG => "INVALID_CONFIG",
            INVALID_REQUEST => "INVALID_REQUEST",
            SECURITY_DISABLED => "SECURITY_DISABLED",
            KAFKA_STORAGE_ERROR => "KAFKA_STORAGE_ERROR",
            FETCH_SESSION_ID_NOT_FOUND => "FETCH_SESSION_ID_NOT_FOUND",
            INVALID_FETCH_SESSION_EPOCH => "INVALID_FETCH_SESSION_EPOCH",
            FENCED_LEADER_EPOCH => "FENCED_LEADER_EPOCH",
            UNKNOWN_LEADER_EPOCH => "UNKNOWN_LEADER_EPOCH",
            UNKNOWN_TOPIC_ID => "UNKNOWN_TOPIC_ID",
            INCONSISTENT_TOPIC_ID => "INCONSISTENT_TOPIC_ID",
            OFFSET_MOVED_TO_TIERED_STORAGE => "OFFSET_MOVED_TO_TIERED_STORAGE",
            INVALID_REGULAR_EXPRESSION => "INVALID_REGULAR_EXPRESSION",
            READ_ONLY_TOPIC => "READ_ONLY_TOPIC",
            INVALID_MIRROR_NAME => "INVALID_MIRROR_NAME",
            UNKNOWN_MIRROR => "UNKNOWN_MIRROR",
            TOPIC_ALREADY_IN_MIRROR => "TOPIC_ALREADY_IN_MIRROR",
            TOPIC_NOT_IN_MIRROR => "TOPIC_NOT_IN_MIRROR",
            MIRROR_TOPIC_ALREADY_PAUSED => "MIRROR_TOPIC_ALREADY_PAUSED",
            MIRROR_TOPIC_NOT_PAUSED => "MIRROR_TOPIC_NOT_PAUSED",
            MIRROR_TOPIC_BEING_REMOVED => "MIRROR_TOPIC_BEING_REMOVED",
            MIRROR_NOT_EMPTY => "MIRROR_NOT_EMPTY",
            MIRROR_AUTHORIZATION_FAILED => "MIRROR_AUTHORIZATION_FAILED",
            MIRROR_ALREADY_EXISTS => "MIRROR_ALREADY_EXISTS",
            _ => "UNKNOWN_ERROR_CODE",
        }
    }

    /// The seed 000 default message for a mirror error code, used when a handler has nothing
    /// more specific to say.
    pub fn default_message(code: i16) -> &'static str {
        match code {
            UNKNOWN_TOPIC_OR_PARTITION => "The topic does not exist on the target cluster",
            COORDINATOR_NOT_AVAILABLE => "The mirror coordinator is not active",
            CLUSTER_AUTHORIZATION_FAILED => {
                "The client is not authorized to perform the mirror operation"
            }
            UNSUPPORTED_VERSION => "Cluster mirroring is disabled (mirror.version=0)",
            MIRROR_AUTHORIZATION_FAILED => "Mirror authorization failed",
            READ_ONLY_TOPIC => {
                "The topic is read-only because it is a mirror topic on the target cluster"
            }
            INVALID_MIRROR_NAME => "The mirror name does not meet the naming rules",
            UNKNOWN_MIRROR => "The topic is not assigned to any mirror",
            TOPIC_ALREADY_IN_MIRROR => "The topic is already assigned to a mirror",
            TOPIC_NOT_IN_MIRROR => "The topic does not belong to the specified mirror",
            MIRROR_TOPIC_ALREADY_PAUSED => "The mirror topic is already paused",
            MIRROR_TOPIC_NOT_PAUSED => "The mirror topic is not paused",
            MIRROR_TOPIC_BEING_REMOVED => "The mirror topic is being removed",
            MIRROR_NOT_EMPTY => "The mirror still has active or non-removed topics",
            MIRROR_ALREADY_EXISTS => "A mirror with this name already exists",
            _ => name(code),
        }
    }
}

/// Kafka error code for a control-plane mirror error (the one mapping from
/// [`kmirror_control::mirror::MirrorError`] to the wire).
pub fn mirror_error_code(e: &kmirror_control::mirror::MirrorError) -> i16 {
    use kmirror_control::mirror::MirrorError as E;
    match e {
        E::InvalidMirrorName { .. } => error::INVALID_MIRROR_NAME,
        E::InvalidSetting { .. } => error::INVALID_REQUEST,
        E::InvalidRegex { .. } => error::INVALID_REGULAR_EXPRESSION,
        E::UnknownMirror(_) => error::UNKNOWN_MIRROR,
        E::MirrorAlreadyExists(_) => error::MIRROR_ALREADY_EXISTS,
        E::MirrorNotEmpty { .. } => error::MIRROR_NOT_EMPTY,
        E::TopicNotInMirror { .. } => error::TOPIC_NOT_IN_MIRROR,
        E::IllegalTransition { .. } | E::FailoverOutOfOrder { .. } => error::INVALID_REQUEST,
        E::UnknownPartition(_) => error::UNKNOWN_TOPIC_OR_PARTITION,
        _ => error::UNKNOWN_SERVER_ERROR,
    }
}

/// Kafka error code for a refused user operation on a partition state.
pub fn state_refusal_code(r: kmirror_control::mirror::StateRefusal) -> i16 {
    use kmirror_control::mirror::StateRefusal as R;
    match r {
        R::AlreadyPaused => error::MIRROR_TOPIC_ALREADY_PAUSED,
        R::NotPaused => error::MIRROR_TOPIC_NOT_PAUSED,
        R::BeingRemoved => error::MIRROR_TOPIC_BEING_REMOVED,
        R::AlreadyInMirror => error::TOPIC_ALREADY_IN_MIRROR,
        R::Invalid => error::INVALID_REQUEST,
    }
}

/// The `mirror.version` feature (advertised in ApiVersions' finalized features).
pub mod feature {
    /// Feature name, as KIP-1279 names it.
    pub const MIRROR_VERSION: &str = "mirror.version";
    /// Highest level kmirror supports.
    pub const MAX_LEVEL: i16 = 1;
    /// Level 0 = feature off: every mirror API answers UNSUPPORTED_VERSION.
    pub const DISABLED: i16 = 0;

    /// Error code a mirror API request must get at the given finalized level, if any.
    pub fn gate(level: i16) -> Option<i16> {
        (level <= DISABLED).then_some(super::error::UNSUPPORTED_VERSION)
    }
}

/// Topic configs and control-record types the mirror paths rely on.
pub mod config {
    /// Topic config naming the owning mirror; hidden from DescribeConfigs (seed 000).
    pub const MIRROR_NAME: &str = kmirror_control::mirror::MIRROR_NAME_CONFIG;
    /// Suffix appended to `mirror.name` by RemoveTopicsFromMirror (failover requested).
    pub const REMOVED_SUFFIX: &str = ".removed";
    /// Per-topic list of replicas whose mirror traffic is throttled.
    pub const MIRROR_REPLICATION_THROTTLED_REPLICAS: &str =
        kmirror_control::mirror::THROTTLED_REPLICAS_CONFIG;
    /// Topic-config exclusion regexes for mirror config sync (seed 003).
    pub const MIRROR_TOPIC_PROPERTIES_EXCLUDE: &str = "mirror.topic.properties.exclude";
    /// Name of the internal state log.
    pub const MIRROR_STATE_TOPIC: &str = "__mirror_state";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_api_keys_are_distinct_and_inside_the_block() {
        let mut keys: Vec<i16> = api::USER_FACING.iter().map(|(k, _)| *k).collect();
        keys.extend([
            api::READ_MIRROR_STATES,
            api::WRITE_MIRROR_STATES,
            api::BUMP_LEADER_EPOCHS,
        ]);
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "duplicate mirror API key");
        assert!(keys.iter().all(|k| api::is_mirror_api(*k)));
        assert!(
            !api::is_mirror_api(1),
            "Fetch must not be gated as a mirror API"
        );
        assert_eq!(
            api::CREATE_MIRROR,
            94,
            "upstream prototype key for CreateMirror"
        );
    }

    #[test]
    fn mirror_error_codes_are_distinct_and_named() {
        let codes = [
            error::READ_ONLY_TOPIC,
            error::INVALID_MIRROR_NAME,
            error::UNKNOWN_MIRROR,
            error::TOPIC_ALREADY_IN_MIRROR,
            error::TOPIC_NOT_IN_MIRROR,
            error::MIRROR_TOPIC_ALREADY_PAUSED,
            error::MIRROR_TOPIC_NOT_PAUSED,
            error::MIRROR_TOPIC_BEING_REMOVED,
            error::MIRROR_NOT_EMPTY,
            error::MIRROR_AUTHORIZATION_FAILED,
            error::MIRROR_ALREADY_EXISTS,
        ];
        let mut sorted = codes.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), codes.len());
        for c in codes {
            assert_ne!(error::name(c), "UNKNOWN_ERROR_CODE", "code {c} has no name");
        }
    }

    #[test]
    fn mirror_version_zero_gates_with_unsupported_version() {
        assert_eq!(feature::gate(0), Some(error::UNSUPPORTED_VERSION));
        assert_eq!(feature::gate(1), None);
    }
}
