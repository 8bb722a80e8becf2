//! The one place internal errors become Kafka error codes.
//!
//! Every handler reports failures through these functions, so a given internal condition
//! always reaches clients as the same code (and clients' retry logic behaves predictably).

use kafka_protocol::ResponseError as E;
use kmirror_control::metadata::MetadataError;
use kmirror_engine::EngineError;
use kmirror_log::LogError;

use crate::keys;

pub(crate) const NONE: i16 = 0;

/// Kafka's default messages of two codes, sent where Kafka sends them (DescribeProducers for
/// a topic it does not know, ElectLeaders for a partition already led by its preferred leader).
pub(crate) const UNKNOWN_TOPIC_OR_PARTITION_MESSAGE: &str =
    "This server does not host this topic-partition.";
pub(crate) const ELECTION_NOT_NEEDED_MESSAGE: &str =
    "Leader election not needed for topic partition.";

/// Shorthand for a standard Kafka code.
pub(crate) fn code(e: E) -> i16 {
    e.code()
}

pub(crate) fn log_error_code(e: &LogError) -> i16 {
    match e {
        LogError::Corrupt { .. } => E::CorruptMessage.code(),
        LogError::InvalidRecord(_) => E::InvalidRecord.code(),
        LogError::InvalidTimestamp { .. } => E::InvalidTimestamp.code(),
        LogError::KeylessRecords { bad_timestamps, .. } if !bad_timestamps.is_empty() => {
            E::InvalidTimestamp.code()
        }
        LogError::KeylessRecords { .. } => E::InvalidRecord.code(),
        LogError::RecordTooLarge { .. } => E::MessageTooLarge.code(),
        // Only mirror appends can hit this; the fetcher treats it as a request problem.
        LogError::NonMonotonicMirrorOffset { .. } => E::InvalidRequest.code(),
        LogError::OffsetOutOfRange { .. } => E::OffsetOutOfRange.code(),
        LogError::DuplicateSequence { .. } => E::DuplicateSequenceNumber.code(),
        LogError::OutOfOrderSequence { .. } => E::OutOfOrderSequenceNumber.code(),
        LogError::InvalidProducerEpoch { .. } => E::InvalidProducerEpoch.code(),
        LogError::InvalidTxnState { .. } => E::InvalidTxnState.code(),
        LogError::TransactionCoordinatorFenced { .. } => E::TransactionCoordinatorFenced.code(),
        LogError::Io(_) => E::KafkaStorageError.code(),
        #[allow(unreachable_patterns)]
        _ => E::UnknownServerError.code(),
    }
}

pub(crate) fn engine_error_code(e: &EngineError) -> i16 {
    match e {
        EngineError::UnknownPartition(_) => E::UnknownTopicOrPartition.code(),
        EngineError::ReadOnly { .. } => keys::error::READ_ONLY_TOPIC,
        // The client should refresh metadata and retry (e.g. against the restarted node).
        EngineError::ShuttingDown => E::NotLeaderOrFollower.code(),
        // Moving between cores: retry after a metadata refresh, as after a leader change.
        EngineError::NotOwner(_) => E::NotLeaderOrFollower.code(),
        EngineError::NotLeader(_) => E::NotLeaderOrFollower.code(),
        EngineError::NotEnoughReplicas { .. } | EngineError::WriteFenced { .. } => {
            E::NotEnoughReplicas.code()
        }
        EngineError::JobPanicked { .. } => E::UnknownServerError.code(),
        EngineError::Log(l) => log_error_code(l),
        EngineError::Io(_) => E::KafkaStorageError.code(),
        _ => E::UnknownServerError.code(),
    }
}

/// An extension's refusal or failure (dynamic broker config, feature level): a bad value is
/// INVALID_REQUEST, a failure to persist it UNKNOWN_SERVER_ERROR (the change did not happen).
pub(crate) fn extension_error_code(e: &crate::broker::ExtensionError) -> i16 {
    use crate::broker::ExtensionError as X;
    match e {
        X::Invalid(_) => E::InvalidRequest.code(),
        X::Persist { .. } => E::UnknownServerError.code(),
        #[allow(unreachable_patterns)]
        _ => E::UnknownServerError.code(),
    }
}

/// How an `acks=all` produce ends when it did not simply succeed.
pub(crate) fn ack_state_code(s: kmirror_engine::AckState) -> i16 {
    use kmirror_engine::AckState as A;
    match s {
        A::Done => 0,
        A::Waiting => E::RequestTimedOut.code(),
        A::NotEnoughReplicasAfterAppend => E::NotEnoughReplicasAfterAppend.code(),
        A::NotLeader => E::NotLeaderOrFollower.code(),
    }
}

/// A replica's Fetch the leader cannot record: Kafka's Partition answers UNKNOWN_LEADER_EPOCH
/// to a non-replica that named the current leader epoch (it may be a replica being added),
/// NOT_LEADER_OR_FOLLOWER otherwise.
pub(crate) fn replica_fetch_code(e: kmirror_engine::ReplicaFetchError, named_epoch: bool) -> i16 {
    use kmirror_engine::ReplicaFetchError as R;
    match e {
        R::NotReplica if named_epoch => E::UnknownLeaderEpoch.code(),
        R::NotReplica | R::NotLeader => E::NotLeaderOrFollower.code(),
    }
}

pub(crate) fn acl_error_code(e: &kmirror_control::acl::AclError) -> i16 {
    use kmirror_control::acl::AclError as A;
    match e {
        A::Invalid(_) => E::InvalidRequest.code(),
        A::Io(_) | A::Corrupt { .. } => E::KafkaStorageError.code(),
        #[allow(unreachable_patterns)]
        _ => E::UnknownServerError.code(),
    }
}

pub(crate) fn quota_error_code(e: &kmirror_control::quota::QuotaError) -> i16 {
    use kmirror_control::quota::QuotaError as Q;
    match e {
        Q::Invalid(_) => E::InvalidRequest.code(),
        Q::Unsupported(_) => E::UnsupportedVersion.code(),
        Q::Io(_) | Q::Corrupt { .. } => E::KafkaStorageError.code(),
        #[allow(unreachable_patterns)]
        _ => E::UnknownServerError.code(),
    }
}

/// The authorization-failed code of a resource type (Kafka's `AclEntry.authorizationError`).
pub(crate) fn authorization_failed(resource_type: i8) -> i16 {
    use kmirror_control::authz::resource as R;
    match resource_type {
        R::TOPIC => E::TopicAuthorizationFailed.code(),
        R::GROUP => E::GroupAuthorizationFailed.code(),
        R::TRANSACTIONAL_ID => E::TransactionalIdAuthorizationFailed.code(),
        R::DELEGATION_TOKEN => E::DelegationTokenAuthorizationFailed.code(),
        _ => E::ClusterAuthorizationFailed.code(),
    }
}

pub(crate) fn scram_error_code(e: &kmirror_control::scram::ScramError) -> i16 {
    use kmirror_control::scram::ScramError as S;
    match e {
        S::UnknownMechanism(_) => E::UnsupportedSaslMechanism.code(),
        S::Unacceptable(_) => E::UnacceptableCredential.code(),
        S::NotFound(_) => E::ResourceNotFound.code(),
        S::Duplicate(_) => E::DuplicateResource.code(),
        S::Io(_) | S::Corrupt { .. } => E::KafkaStorageError.code(),
        #[allow(unreachable_patterns)]
        _ => E::UnknownServerError.code(),
    }
}

pub(crate) fn metadata_error_code(e: &MetadataError) -> i16 {
    match e {
        MetadataError::TopicExists(_) => E::TopicAlreadyExists.code(),
        MetadataError::UnknownTopic(_) => E::UnknownTopicOrPartition.code(),
        MetadataError::InvalidTopicName { .. } => E::InvalidTopicException.code(),
        MetadataError::InvalidPartitions(_) => E::InvalidPartitions.code(),
        MetadataError::InvalidReplicationFactor(_) => E::InvalidReplicationFactor.code(),
        MetadataError::InvalidConfig { .. } => E::InvalidConfig.code(),
        MetadataError::MirrorReadOnly(_) => keys::error::READ_ONLY_TOPIC,
        MetadataError::Io(_) | MetadataError::Corrupt { .. } => E::KafkaStorageError.code(),
        MetadataError::ReplicationFactorTooLarge { .. } => E::InvalidReplicationFactor.code(),
        MetadataError::BrokerNotRegistered(_) => E::BrokerIdNotRegistered.code(),
        MetadataError::UnknownPartition { .. } => E::UnknownTopicOrPartition.code(),
        MetadataError::InvalidReplicaAssignment(_) => E::InvalidReplicaAssignment.code(),
        MetadataError::ReplicationFactorChange { .. } => E::InvalidReplicationFactor.code(),
        MetadataError::NoReassignmentInProgress => E::NoReassignmentInProgress.code(),
        MetadataError::NotLeader { .. } => E::NotLeaderOrFollower.code(),
        MetadataError::FencedLeaderEpoch { .. } => E::FencedLeaderEpoch.code(),
        MetadataError::InvalidUpdateVersion { .. } => E::InvalidUpdateVersion.code(),
        MetadataError::IneligibleReplica { .. } => E::IneligibleReplica.code(),
        MetadataError::InvalidRequest(_) => E::InvalidRequest.code(),
        MetadataError::ElectionNotNeeded { .. } => E::ElectionNotNeeded.code(),
        MetadataError::PreferredLeaderNotAvailable { .. } => E::PreferredLeaderNotAvailable.code(),
        _ => E::UnknownServerError.code(),
    }
}

/// A failed proposal as a Kafka code: the state machine's refusal keeps its own code; no
/// controller is NOT_CONTROLLER (clients retry admin requests on it, as on Kafka's forwarding
/// to the active controller); an unknown outcome is REQUEST_TIMED_OUT, as Kafka answers around
/// a controller failover.
pub(crate) fn propose_failure_code(e: &crate::cluster::ProposeFailure) -> i16 {
    use crate::cluster::ProposeFailure as F;
    use kmirror_control::quorum::ApplyError;
    match e {
        F::Rejected(ApplyError::Metadata(m)) => metadata_error_code(m),
        F::Rejected(ApplyError::Membership(_)) => E::InvalidRequest.code(),
        F::Rejected(ApplyError::CoordinatorFenced { .. }) => E::NotCoordinator.code(),
        F::Rejected(ApplyError::MirrorLeaderFenced { .. }) => E::FencedLeaderEpoch.code(),
        F::NoLeader { .. } | F::Unavailable(_) => E::NotController.code(),
        F::Unknown => E::RequestTimedOut.code(),
        F::Voter(v) => voter_error_code(v),
    }
}

/// AddRaftVoter / RemoveRaftVoter refusals as Kafka's `AddVoterHandler` /
/// `RemoveVoterHandler` answer them.
pub(crate) fn voter_error_code(e: &kmirror_cluster::VoterError) -> i16 {
    use kmirror_cluster::VoterError as V;
    match e {
        V::ChangePending | V::NotCaughtUp { .. } => E::RequestTimedOut.code(),
        V::Duplicate(_) => E::DuplicateVoter.code(),
        V::NotFound { .. } => E::VoterNotFound.code(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_types::{Offset, ProducerId};

    #[test]
    fn idempotence_and_crc_errors_reach_clients_as_their_kafka_codes() {
        let crc = LogError::Corrupt {
            offset_hint: None,
            reason: "crc".into(),
        };
        assert_eq!(log_error_code(&crc), 2);
        let dup = LogError::DuplicateSequence {
            producer_id: ProducerId(1),
            sequence: 3,
        };
        assert_eq!(log_error_code(&dup), 46);
        let ooo = LogError::OutOfOrderSequence {
            producer_id: ProducerId(1),
            sequence: 9,
            last_sequence: 3,
        };
        assert_eq!(log_error_code(&ooo), 45);
        let oor = EngineError::Log(LogError::OffsetOutOfRange {
            requested: Offset(9),
            log_start: Offset(0),
            log_end: Offset(1),
        });
        assert_eq!(engine_error_code(&oor), 1);
    }

    #[test]
    fn admin_errors_map_to_the_codes_admin_clients_expect() {
        assert_eq!(
            metadata_error_code(&MetadataError::TopicExists("t".into())),
            36
        );
        assert_eq!(
            metadata_error_code(&MetadataError::InvalidConfig {
                key: "k".into(),
                reason: "r".into()
            }),
            40
        );
        assert_eq!(
            metadata_error_code(&MetadataError::InvalidReplicationFactor(3)),
            38
        );
        // The replicated controller's refusals (AlterPartition, elections).
        let (topic, partition) = (String::from("t"), 0);
        for (e, code) in [
            (
                MetadataError::FencedLeaderEpoch {
                    topic: topic.clone(),
                    partition,
                    given: 1,
                    current: 2,
                },
                74,
            ),
            (
                MetadataError::InvalidUpdateVersion {
                    topic: topic.clone(),
                    partition,
                    given: 1,
                    current: 2,
                },
                95,
            ),
            (
                MetadataError::IneligibleReplica {
                    topic: topic.clone(),
                    partition,
                    broker: 3,
                    reason: "fenced".into(),
                },
                107,
            ),
            (MetadataError::ElectionNotNeeded { topic, partition }, 84),
            (MetadataError::BrokerNotRegistered(9), 102),
            (
                MetadataError::ReplicationFactorTooLarge {
                    requested: 4,
                    available: 3,
                },
                38,
            ),
        ] {
            assert_eq!(metadata_error_code(&e), code, "{e}");
        }
    }
}
