//! Records of the offsets log (`__consumer_offsets-0/records.log`), JSON-encoded inside CRC'd
//! frames. Replay applies them in order; the last record for a key wins.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct MemberRec {
    pub(crate) id: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) session_timeout_ms: i32,
    pub(crate) rebalance_timeout_ms: i32,
    /// Metadata for the group's selected protocol.
    pub(crate) metadata: Vec<u8>,
    pub(crate) assignment: Vec<u8>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "t")]
pub(crate) enum Rec {
    /// Group metadata after a generation completed (Stable with assignments, or Empty).
    Group {
        group: String,
        generation: i32,
        protocol_type: Option<String>,
        protocol: Option<String>,
        leader: Option<String>,
        members: Vec<MemberRec>,
        /// When the group became Empty (Kafka's currentStateTimestamp), for offset expiry.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        empty_since: Option<i64>,
    },
    /// DeleteGroups: the group and all its offsets are gone.
    GroupDeleted { group: String },
    Offset {
        group: String,
        topic: String,
        partition: i32,
        offset: i64,
        leader_epoch: i32,
        metadata: Option<String>,
        ts: i64,
    },
    OffsetDeleted {
        group: String,
        topic: String,
        partition: i32,
    },
    /// A TxnOffsetCommit, pending until the matching `TxnEnd`.
    TxnOffset {
        group: String,
        pid: i64,
        topic: String,
        partition: i32,
        offset: i64,
        leader_epoch: i32,
        metadata: Option<String>,
        ts: i64,
    },
    TxnEnd {
        group: String,
        pid: i64,
        commit: bool,
    },
    /// A KIP-848 consumer group's full state after a change (replaces any classic metadata).
    Consumer {
        group: String,
        state: super::consumer::ConsumerGroup,
    },
}

impl Rec {
    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("coordinator records always serialize")
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Rec, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}
