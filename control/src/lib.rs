//! kmirror control plane: state owned by the single control-plane thread.
//!
//! Owns the durable cluster metadata (`metadata`) and its Raft-replicated form (`quorum`), the durable ACL store (`acl`), the pure ACL evaluator (`authz`), the SCRAM credential store (`scram`), the client quota store (`quota`), the mirror definitions and partition state
//! machine (`mirror`), the classic consumer-group coordinator with its durable committed-offset store
//! (`group`), the in-flight window of a share group on a partition (`share`, KIP-932), the producer-id allocator and transaction coordinator (`txn`), the small
//! CRC-framed record file both persist into (`offsets_log`), written through `append_file`,
//! which never leaves a torn record in front of a later one, Kafka's coordinator record
//! format of what they write there (`coordinator_record`), those records as the Kafka record
//! batches of the coordinator partitions (`coordinator_batch`), and which internal-topic
//! partition coordinates a group or transactional id (`coordinator_partition`). Everything here is plain
//! single-threaded state driven by explicit `now_ms` arguments and returning outcomes: no async
//! runtime, no glommio, no wire-protocol crate (the `net` crate maps Kafka messages onto these
//! types). Invariant: a reply is handed out only after the state change it reports was made
//! durable with the owner's `flush`.

pub mod acl;
pub mod append_file;
pub mod authz;
pub mod broker_config;
mod broker_config_table;
pub mod coordinator_batch;
pub mod coordinator_partition;
pub mod coordinator_record;
pub mod group;
pub mod group_config;
pub mod metadata;
pub mod mirror;
pub mod offsets_log;
pub mod quorum;
pub mod quota;
pub mod replace_file;
pub mod replicated;
pub mod scram;
pub mod share;
pub mod txn;
