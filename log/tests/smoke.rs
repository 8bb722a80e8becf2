mod common;
use common::*;
use kmirror_log::*;

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(4096)).unwrap();
    for i in 0..20 {
        let info = log
            .append_leader(plain(0, 0, 3, 100, 1000 + i, i as u64), LeaderEpoch(5), 0)
            .unwrap();
        assert_eq!(info.first_offset, Offset(i * 3));
    }
    assert_eq!(log.log_end_offset(), Offset(60));
    log.set_high_watermark(Offset(60));
    let r = log.read(Offset(10), 1, Offset(60)).unwrap();
    assert_eq!(r.first_offset, Offset(9));
    println!("{} segments", log.segment_count());
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config(4096)).unwrap();
    assert_eq!(log.log_end_offset(), Offset(60));
    assert_eq!(log.high_watermark(), Offset(60));
    let r = log.read(Offset(59), 100000, Offset(60)).unwrap();
    assert_eq!(r.first_offset, Offset(57));
    assert_eq!(log.latest_epoch(), Some(LeaderEpoch(5)));
}
