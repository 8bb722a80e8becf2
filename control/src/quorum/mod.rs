//! Cluster metadata replicated by Raft (issue 12, step 1): TiKV's raft-rs `RawNode` over a
//! durable log, applying [`command::ClusterCommand`]s to an in-memory [`MetadataStore`].
//!
//! Runtime-agnostic like the rest of `control`: no threads, no sockets, no clock. The owner
//! (the `kmirror-cluster` crate's driver) ticks, carries messages and publishes the applied
//! metadata. Invariant: every node applying the same log reaches byte-identical state; the
//! commands carry whatever is nondeterministic (ids) and apply is a pure function of state and
//! command.
//!
//! [`MetadataStore`]: crate::metadata::MetadataStore

pub mod command;
pub mod controller;
pub mod node;
pub mod storage;
pub mod upgrade;

pub use command::{AclCommand, ClusterCommand, MetadataCommand, Outcome};
pub use node::{
    ApplyError, MembershipChange, Polled, ProposalId, ProposalResult, ProposeError, QuorumConfig,
    QuorumError, QuorumMember, QuorumNode,
};
pub use storage::{DurableStorage, StorageError};

#[cfg(test)]
mod tests;
