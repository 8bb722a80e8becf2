//! DescribeTransactions and ListTransactions, answered from the transaction coordinator's
//! state. These run on the coordinator thread (`groups.rs` calls them with its
//! [`TxnCoordinator`]); authorization happens before (DescribeTransactions: DESCRIBE on each
//! transactional id) and after (ListTransactions: ids the principal may not describe are
//! left out) in the server's dispatch, as Kafka's `KafkaApis` does.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as Listed;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError as E;
use kmirror_control::txn::{TxnCoordinator, TxnState};

use super::{s, topic_name};

/// DescribeTransactions: TRANSACTIONAL_ID_NOT_FOUND for an id the coordinator does not know.
pub(crate) fn describe(txns: &TxnCoordinator, req: &DescribeTransactionsRequest) -> ResponseKind {
    let states = req
        .transactional_ids
        .iter()
        .map(|id| {
            let base = TransactionState::default().with_transactional_id(id.clone());
            match txns.describe(id.as_str()) {
                // Kafka leaves every other field at its default (0, empty).
                None => base.with_error_code(E::TransactionalIdNotFound.code()),
                Some(v) => {
                    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for (t, p) in v.partitions {
                        by_topic.entry(t).or_default().push(p);
                    }
                    base.with_transaction_state(s(v.state.name()))
                        .with_transaction_timeout_ms(v.timeout_ms)
                        .with_transaction_start_time_ms(v.start_ms)
                        .with_producer_id(ProducerId(v.producer_id))
                        .with_producer_epoch(v.producer_epoch)
                        .with_topics(
                            by_topic
                                .into_iter()
                                .map(|(t, ps)| {
                                    TopicData::default()
                                        .with_topic(topic_name(&t))
                                        .with_partitions(ps)
                                })
                                .collect(),
                        )
                }
            }
        })
        .collect();
    ResponseKind::DescribeTransactions(
        DescribeTransactionsResponse::default().with_transaction_states(states),
    )
}

/// ListTransactions with its filters: states (unknown names are echoed back), producer ids,
/// duration (v1+: open longer than this) and the transactional-id pattern (v2+, a regular
/// expression the whole id must match; INVALID_REGULAR_EXPRESSION when it does not parse).
pub(crate) fn list(
    txns: &TxnCoordinator,
    req: &ListTransactionsRequest,
    version: i16,
    now_ms: i64,
) -> ResponseKind {
    let mut resp = ListTransactionsResponse::default();
    let pattern = match req
        .transactional_id_pattern
        .as_ref()
        .filter(|_| version >= 2)
    {
        Some(p) if !p.is_empty() => match regex::Regex::new(&format!("^(?:{})$", p.as_str())) {
            Ok(r) => Some(r),
            Err(_) => {
                resp.error_code = E::InvalidRegularExpression.code();
                return ResponseKind::ListTransactions(resp);
            }
        },
        _ => None,
    };
    let mut wanted: Vec<&str> = Vec::new();
    for f in &req.state_filters {
        if TxnState::KAFKA_NAMES.contains(&f.as_str()) {
            wanted.push(f.as_str());
        } else {
            resp.unknown_state_filters.push(f.clone());
        }
    }
    let duration = if version >= 1 {
        req.duration_filter
    } else {
        -1
    };
    for (id, v) in txns.list() {
        if !req.producer_id_filters.is_empty()
            && !req.producer_id_filters.contains(&ProducerId(v.producer_id))
        {
            continue;
        }
        if !req.state_filters.is_empty() && !wanted.contains(&v.state.name()) {
            continue;
        }
        if duration >= 0 && now_ms - v.start_ms <= duration {
            continue;
        }
        if pattern.as_ref().is_some_and(|r| !r.is_match(&id)) {
            continue;
        }
        resp.transaction_states.push(
            Listed::default()
                .with_transactional_id(TransactionalId(s(&id)))
                .with_producer_id(ProducerId(v.producer_id))
                .with_transaction_state(s(v.state.name())),
        );
    }
    ResponseKind::ListTransactions(resp)
}

#[cfg(test)]
mod tests {
    use kmirror_control::txn::TxnConfig;

    use super::*;

    fn listed(resp: ResponseKind) -> (i16, Vec<String>, Vec<String>) {
        let ResponseKind::ListTransactions(r) = resp else {
            panic!("not a ListTransactions answer")
        };
        (
            r.error_code,
            r.transaction_states
                .iter()
                .map(|t| {
                    format!(
                        "{} {}",
                        t.transactional_id.as_str(),
                        t.transaction_state.as_str()
                    )
                })
                .collect(),
            r.unknown_state_filters
                .iter()
                .map(|f| f.to_string())
                .collect(),
        )
    }

    /// Filters as Kafka's ListTransactions applies them: states (unknown names echoed back),
    /// producer ids, duration (only transactions open longer), the id pattern (v2, whole id).
    #[test]
    fn list_transactions_filters() {
        let dir = tempfile::tempdir().unwrap();
        let (mut c, _) = TxnCoordinator::open(dir.path(), TxnConfig::default()).unwrap();
        let (open, _) = c.init_producer_id(Some("t-open"), 60_000, None, 1_000);
        let (open_pid, epoch) = open.unwrap();
        c.init_producer_id(Some("t-idle"), 60_000, None, 1_000)
            .0
            .unwrap();
        assert_eq!(
            c.add_partitions("t-open", open_pid, epoch, &[("x".into(), 0)], 2_000),
            0
        );
        let req = |f: fn(ListTransactionsRequest) -> ListTransactionsRequest| {
            f(ListTransactionsRequest::default().with_duration_filter(-1))
        };
        let (code, all, _) = listed(list(&c, &req(|r| r), 2, 10_000));
        assert_eq!(
            (code, all),
            (0, vec!["t-idle Empty".into(), "t-open Ongoing".into()])
        );
        let (_, ongoing, unknown) = listed(list(
            &c,
            &req(|r| r.with_state_filters(vec![s("Ongoing"), s("Bogus")])),
            2,
            10_000,
        ));
        assert_eq!(
            (ongoing, unknown),
            (vec!["t-open Ongoing".into()], vec!["Bogus".into()])
        );
        let (_, by_pid, _) = listed(list(
            &c,
            &ListTransactionsRequest::default()
                .with_duration_filter(-1)
                .with_producer_id_filters(vec![ProducerId(open_pid)]),
            2,
            10_000,
        ));
        assert_eq!(by_pid, vec!["t-open Ongoing".to_string()]);
        // Open 8 s at now=10 000: longer than 5 s, not longer than 9 s. An Empty id has no
        // start time (-1), so Kafka's `now - start > duration` keeps it.
        let long = |d: i64| {
            listed(list(
                &c,
                &ListTransactionsRequest::default().with_duration_filter(d),
                1,
                10_000,
            ))
            .1
        };
        assert_eq!(
            long(5_000),
            vec!["t-idle Empty".to_string(), "t-open Ongoing".into()]
        );
        assert_eq!(long(9_000), vec!["t-idle Empty".to_string()]);
        let pattern = |p: &str, v: i16| {
            listed(list(
                &c,
                &req(|r| r).with_transactional_id_pattern(Some(s(p))),
                v,
                10_000,
            ))
        };
        assert_eq!(pattern("t-o.*", 2).1, vec!["t-open Ongoing".to_string()]);
        assert!(
            pattern("open", 2).1.is_empty(),
            "the pattern matches whole ids"
        );
        assert_eq!(pattern("t-o.*", 1).1.len(), 2, "v1 has no pattern");
        assert_eq!(pattern("(", 2).0, E::InvalidRegularExpression.code());
    }
}
