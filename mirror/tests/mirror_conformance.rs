//! Issue 8, hole 8, the mirror half of the conformance matrix: a plain `kmirror serve`
//! advertises the mirror extension APIs (keys 94-105, version 0 only) in ApiVersions, so each
//! gets a version-0 request over TCP; the response must carry the correlation id, decode whole
//! with the mirror codec, and the connection must stay usable. Apache Kafka has no such APIs,
//! so there is no Kafka half (tests/tests/conformance.rs covers every standard API on both).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Buf, Bytes};
use kmirror_mirror::api::*;

use kmirror_net::keys::api;
use kmirror_tests::KmirrorNode;

struct Conn {
    stream: TcpStream,
    correlation: i32,
}

impl Conn {
    fn call<R: MirrorRequest>(&mut self, req: &R) -> Result<R::Response, String> {
        self.call_as::<R, R::Response>(R::KEY, req)
    }

    /// Sends `req`'s body under `key` and decodes the answer as `Resp`, whole.
    fn call_as<R: MirrorRequest, Resp: Wire>(&mut self, key: i16, req: &R) -> Result<Resp, String> {
        self.correlation += 1;
        let corr = self.correlation;
        let body = kmirror_mirror::client::encode_mirror_request(req, corr, "conformance");
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        frame[4..6].copy_from_slice(&key.to_be_bytes());
        self.stream
            .write_all(&frame)
            .map_err(|e| format!("write: {e}"))?;
        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .map_err(|e| format!("no response: {e}"))?;
        let len = i32::from_be_bytes(len);
        if !(0..=1 << 20).contains(&len) {
            return Err(format!("response length {len}"));
        }
        let mut buf = vec![0u8; len as usize];
        self.stream
            .read_exact(&mut buf)
            .map_err(|e| format!("truncated response: {e}"))?;
        let mut body = Bytes::from(buf);
        let got = read_response_header_v1(&mut body).map_err(|e| e.to_string())?;
        if got != corr {
            return Err(format!("correlation id {got} != {corr}"));
        }
        let resp = Resp::read(&mut body).map_err(|e| format!("decode: {e}"))?;
        if body.has_remaining() {
            return Err(format!(
                "{} bytes left after the response",
                body.remaining()
            ));
        }
        Ok(resp)
    }
}

/// The top-level code, or the first topic's when the top level is 0.
fn topic_code(r: &MirrorTopicsResponse) -> i16 {
    if r.error_code != 0 {
        r.error_code
    } else {
        r.topics.first().map(|t| t.error_code).unwrap_or(0)
    }
}

fn refused(what: &str, code: i16) -> Result<(), String> {
    if code != 0 {
        Ok(())
    } else {
        Err(format!(
            "{what}: error code 0 for a mirror that does not exist"
        ))
    }
}

#[test]
fn every_advertised_mirror_api_answers_decodably_on_a_plain_serve() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let node = KmirrorNode::start();
    let w = kmirror_tests::WireClient::connect(&node.addr()).expect("connect");
    let advertised: Vec<i16> = (api::CREATE_MIRROR..=api::BUMP_LEADER_EPOCHS)
        .filter(|k| w.version_range(*k) == Some((0, 0)))
        .collect();
    assert_eq!(
        advertised,
        (api::CREATE_MIRROR..=api::BUMP_LEADER_EPOCHS).collect::<Vec<_>>(),
        "every mirror API advertised at version 0 only"
    );
    let stream = TcpStream::connect(node.addr()).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let mut c = Conn {
        stream,
        correlation: 0,
    };
    let nope = || "nope".to_string();
    let mut failures = Vec::new();
    for key in advertised {
        let r: Result<(), String> = match key {
            api::CREATE_MIRROR => c
                .call(&CreateMirrorRequest::default())
                .and_then(|r| refused("CreateMirror without a name", r.error_code)),
            api::ADD_TOPICS_TO_MIRROR => c
                .call(&AddTopicsToMirrorRequest {
                    mirror_name: nope(),
                    ..Default::default()
                })
                .and_then(|r| refused("AddTopicsToMirror", r.error_code)),
            api::REMOVE_TOPICS_FROM_MIRROR => c
                .call(&RemoveTopicsFromMirrorRequest {
                    mirror_name: nope(),
                    topics: vec![TopicName {
                        topic_name: "t".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .and_then(|r| refused("RemoveTopicsFromMirror", topic_code(&r))),
            api::LAST_MIRRORED_EPOCHS => c
                .call(&LastMirroredEpochsRequest {
                    mirror_name: nope(),
                    ..Default::default()
                })
                .map(|_| ()),
            api::LIST_MIRRORS => c.call(&ListMirrorsRequest::default()).and_then(|r| {
                if r.error_code == 0 && r.mirrors.is_empty() {
                    Ok(())
                } else {
                    Err(format!("ListMirrors: {r:?}"))
                }
            }),
            api::DESCRIBE_MIRRORS => c
                .call(&DescribeMirrorsRequest {
                    mirror_names: vec![nope()],
                    ..Default::default()
                })
                .and_then(|r| {
                    let code = r
                        .mirrors
                        .first()
                        .map(|m| m.error_code)
                        .unwrap_or(r.error_code);
                    refused("DescribeMirrors", code)
                }),
            api::READ_MIRROR_STATES => c
                .call(&ReadMirrorStatesRequest {
                    mirror_name: nope(),
                    ..Default::default()
                })
                .map(|_| ()),
            api::WRITE_MIRROR_STATES => c
                .call(&WriteMirrorStatesRequest {
                    mirror_name: nope(),
                    ..Default::default()
                })
                .map(|_| ()),
            api::PAUSE_MIRROR_TOPICS => c
                .call(&PauseMirrorTopicsRequest(PauseResumeTopics {
                    mirror_name: nope(),
                    topics: vec![TopicRef {
                        topic_name: "t".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }))
                .and_then(|r| refused("PauseMirrorTopics", topic_code(&r))),
            api::RESUME_MIRROR_TOPICS => c
                .call(&ResumeMirrorTopicsRequest(PauseResumeTopics {
                    mirror_name: nope(),
                    topics: vec![TopicRef {
                        topic_name: "t".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }))
                .and_then(|r| refused("ResumeMirrorTopics", topic_code(&r))),
            api::DELETE_MIRROR => c
                .call(&DeleteMirrorRequest {
                    mirror_name: nope(),
                    ..Default::default()
                })
                .and_then(|r| refused("DeleteMirror", r.error_code)),
            api::BUMP_LEADER_EPOCHS => c.call(&BumpLeaderEpochsRequest::default()).map(|_| ()),
            other => Err(format!("no cell for mirror key {other}")),
        };
        if let Err(e) = r {
            failures.push(format!("{} v0: {e}", api::name(key).unwrap_or("?")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The connection is still usable after all of them.
    let r = c
        .call(&ListMirrorsRequest::default())
        .expect("ListMirrors at the end");
    assert_eq!(r.error_code, 0);

    // DescribeMirrors' AuthorizedOperations: the asking principal's mirror operations when
    // asked for (no authorizer: READ 3, ALTER 7 and DESCRIBE 8, as Kafka's bitfield), the
    // schema default otherwise.
    let created = c
        .call(&CreateMirrorRequest {
            mirror_name: "dr".into(),
            configs: vec![MirrorConfig {
                name: "bootstrap.servers".into(),
                value: Some("127.0.0.1:1".into()),
                ..Default::default()
            }],
            ..Default::default()
        })
        .expect("CreateMirror");
    assert_eq!(created.error_code, 0, "{created:?}");
    for (include, want) in [(true, (1 << 3) | (1 << 7) | (1 << 8)), (false, i32::MIN)] {
        let r = c
            .call(&DescribeMirrorsRequest {
                mirror_names: vec!["dr".into()],
                include_authorized_operations: include,
                ..Default::default()
            })
            .expect("DescribeMirrors");
        assert_eq!(
            r.mirrors[0].authorized_operations, want,
            "include={include}"
        );
    }
}
