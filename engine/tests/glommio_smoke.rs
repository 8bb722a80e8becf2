//! Proves the glommio runtime works in this environment: executor, TCP, file I/O.
use glommio::{LocalExecutorBuilder, Placement};

#[test]
fn glommio_executor_can_spawn_bind_and_write_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let ex = LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            let l = glommio::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let t = glommio::spawn_local(async move {
                let mut s = l.accept().await.unwrap();
                use futures_lite::AsyncReadExt;
                let mut buf = [0u8; 5];
                s.read_exact(&mut buf).await.unwrap();
                buf
            });
            let mut c = glommio::net::TcpStream::connect(addr).await.unwrap();
            use futures_lite::AsyncWriteExt;
            c.write_all(b"hello").await.unwrap();
            let got = t.await;
            let f = glommio::io::BufferedFile::create(&path).await.unwrap();
            f.write_at(b"data".to_vec(), 0).await.unwrap();
            f.fdatasync().await.unwrap();
            f.close().await.unwrap();
            (got, std::fs::read(&path).unwrap())
        })
        .unwrap();
    let (got, file) = ex.join().unwrap();
    assert_eq!(&got, b"hello");
    assert_eq!(file, b"data");
}
