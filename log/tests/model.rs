//! Property test: random sequences of leader append, mirror append, truncate, roll,
//! delete-records, HW moves and close/reopen (clean or not) against a plain in-memory model.
//! After every step every read must return exactly the model's batches.
mod common;

use bytes::Bytes;
use common::*;
use kmirror_log::batch::BatchIter;
use kmirror_log::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Leader {
        n: usize,
        size: usize,
        bump_epoch: bool,
    },
    Mirror {
        gap: i64,
        n: usize,
        size: usize,
    },
    Truncate {
        frac: f64,
    },
    Roll,
    DeleteRecords {
        frac: f64,
    },
    SetHw {
        frac: f64,
    },
    Reopen {
        clean: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..5, 0usize..300, proptest::bool::weighted(0.2))
            .prop_map(|(n, size, bump_epoch)| Op::Leader { n, size, bump_epoch }),
        4 => (0i64..4, 1usize..5, 0usize..300).prop_map(|(gap, n, size)| Op::Mirror { gap, n, size }),
        1 => (0.0f64..1.0).prop_map(|frac| Op::Truncate { frac }),
        1 => Just(Op::Roll),
        1 => (0.0f64..1.0).prop_map(|frac| Op::DeleteRecords { frac }),
        2 => (0.0f64..=1.0).prop_map(|frac| Op::SetHw { frac }),
        1 => proptest::bool::ANY.prop_map(|clean| Op::Reopen { clean }),
    ]
}

#[derive(Default, Debug)]
struct Model {
    /// (base, last, stored bytes)
    batches: Vec<(i64, i64, Bytes)>,
    log_start: i64,
    leo: i64,
    hw: i64,
    epoch: i32,
}

impl Model {
    fn pick(&self, lo: i64, hi: i64, frac: f64) -> i64 {
        lo + ((hi - lo) as f64 * frac) as i64
    }

    /// All batches a consumer reading from `from` up to `upper` sees, in order.
    fn expected_from(&self, from: i64, upper: i64) -> Vec<Bytes> {
        self.batches
            .iter()
            .filter(|(_, last, _)| *last >= from)
            .take_while(|(_, last, _)| *last < upper)
            .map(|(_, _, b)| b.clone())
            .collect()
    }
}

fn split(records: &Bytes) -> Vec<Bytes> {
    BatchIter::validating(records)
        .map(|r| {
            let (_, s, e) = r.expect("valid");
            records.slice(s..e)
        })
        .collect()
}

fn check(log: &Log, m: &Model, probe: u64) {
    assert_eq!(log.log_end_offset(), Offset(m.leo), "leo");
    assert_eq!(log.log_start_offset(), Offset(m.log_start), "log start");
    assert_eq!(log.high_watermark(), Offset(m.hw), "hw");
    let upper = m.hw;
    // Full scan from several start points with a small max_bytes.
    let span = (m.leo - m.log_start).max(1) as u64;
    for from in [
        m.log_start,
        m.log_start + (probe % span) as i64,
        m.hw,
        m.leo,
    ] {
        let from = from.min(m.leo);
        let expected = m.expected_from(from, upper);
        let mut got = Vec::new();
        let mut cur = from;
        loop {
            let r = log
                .read(Offset(cur), 200 + (probe % 700) as usize, Offset(upper))
                .unwrap();
            if r.records.is_empty() {
                break;
            }
            let parts = split(&r.records);
            let total: usize = parts.iter().map(|p| p.len()).sum();
            assert!(parts.len() == 1 || total <= 200 + (probe % 700) as usize);
            let last = BatchIter::headers(&r.records).last().unwrap().unwrap().0;
            cur = last.next_offset();
            got.extend(parts);
        }
        assert_eq!(
            got.len(),
            expected.len(),
            "batches from {from} (model {m:?})"
        );
        assert!(got == expected, "bytes from {from}");
    }
    assert!(log.read(Offset(m.leo + 1), 10, Offset(upper)).is_err());
    if m.log_start > 0 {
        assert!(log
            .read(Offset(m.log_start - 1), 10, Offset(upper))
            .is_err());
    }
}

fn stamp(b: &Bytes, base: i64, epoch: i32) -> Bytes {
    let mut v = b.to_vec();
    v[..8].copy_from_slice(&base.to_be_bytes());
    v[12..16].copy_from_slice(&epoch.to_be_bytes());
    Bytes::from(v)
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || {
        let mut c = small_config(1500);
        c.index_interval_bytes = 128;
        c
    };
    let mut log = Some(Log::open(dir.path(), cfg()).unwrap());
    let mut m = Model::default();
    for (i, op) in ops.into_iter().enumerate() {
        let l = log.as_mut().unwrap();
        match op {
            Op::Leader {
                n,
                size,
                bump_epoch,
            } => {
                if bump_epoch {
                    m.epoch += 1;
                }
                let b = plain(-5, -1, n, size, i as i64, i as u64);
                let info = l.append_leader(b.clone(), LeaderEpoch(m.epoch), 0).unwrap();
                assert_eq!(info.first_offset, Offset(m.leo));
                let last = m.leo + n as i64 - 1;
                m.batches.push((m.leo, last, stamp(&b, m.leo, m.epoch)));
                m.leo = last + 1;
            }
            Op::Mirror { gap, n, size } => {
                let base = m.leo + gap;
                let b = plain(base, m.epoch, n, size, i as i64, i as u64);
                l.append_mirror(b.clone()).unwrap();
                let last = base + n as i64 - 1;
                m.batches.push((base, last, b));
                m.leo = last + 1;
            }
            Op::Truncate { frac } => {
                let to = m.pick(m.log_start, m.leo, frac);
                l.truncate_to(Offset(to)).unwrap();
                m.batches.retain(|(_, last, _)| *last < to);
                m.leo = to;
                m.hw = m.hw.min(to);
            }
            Op::Roll => l.roll().unwrap(),
            Op::DeleteRecords { frac } => {
                let to = m.pick(m.log_start, m.hw, frac);
                let start = l.delete_records_before(Offset(to)).unwrap();
                m.log_start = m.log_start.max(to);
                assert_eq!(start, Offset(m.log_start));
            }
            Op::SetHw { frac } => {
                // The HW only moves forward (truncation aside).
                m.hw = m.hw.max(m.pick(m.log_start, m.leo, frac));
                l.set_high_watermark(Offset(m.hw));
            }
            Op::Reopen { clean } => {
                let l = log.take().unwrap();
                if clean {
                    l.close().unwrap();
                } else {
                    drop(l); // process crash: page cache keeps the data, HW may be older
                }
                let l = Log::open(dir.path(), cfg()).unwrap();
                if clean {
                    assert_eq!(l.high_watermark(), Offset(m.hw));
                } else {
                    assert!(l.high_watermark() <= Offset(m.hw));
                    m.hw = l.high_watermark().0;
                }
                log = Some(l);
            }
        }
        check(log.as_ref().unwrap(), &m, i as u64 * 7919);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn log_matches_in_memory_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops);
    }
}
