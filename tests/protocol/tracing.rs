//! With the `tracing` feature, handshakes, closes and protocol errors are
//! reported as events inside a per-connection span.
#![cfg(feature = "tracing")]

use std::sync::{Arc, Mutex};

use crate::support::{child, close_payload, masked};
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use wavesock::{Config, Role, WebSocketStream};

/// Records every event as "span names > message field=value ...".
#[derive(Clone, Default)]
struct Recorder {
    lines: Arc<Mutex<Vec<String>>>,
    spans: Arc<Mutex<Vec<&'static str>>>,
    entered: Arc<Mutex<Vec<u64>>>,
}

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={:?}", field.name(), value));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut spans = self.spans.lock().unwrap();
        spans.push(span.metadata().name());
        Id::from_u64(spans.len() as u64)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let entered = self.entered.lock().unwrap();
        let spans = self.spans.lock().unwrap();
        let mut line = Line(
            entered
                .iter()
                .map(|i| spans[*i as usize - 1])
                .collect::<Vec<_>>()
                .join(">"),
        );
        line.0.push_str(" |");
        event.record(&mut line);
        self.lines.lock().unwrap().push(line.0);
    }
    fn enter(&self, span: &Id) {
        self.entered.lock().unwrap().push(span.into_u64());
    }
    fn exit(&self, _: &Id) {
        self.entered.lock().unwrap().pop();
    }
}

#[test]
fn events_for_close_and_protocol_errors_inside_the_connection_span() {
    // Alone: tracing caches each callsite's interest process-wide, and a
    // callsite first reached by another test while this one installs its
    // subscriber can keep "never" (an event went missing in CI that way).
    if !child::alone() {
        return;
    }
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // A clean close.
        let (a, mut peer) = tokio::io::duplex(4096);
        let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, Config::default()).unwrap();
        peer.write_all(&masked(0x88, &close_payload(1000, "")))
            .await
            .unwrap();
        assert!(ws.next().await.unwrap().unwrap().is_close());
        assert!(ws.next().await.is_none());
        // A protocol violation.
        let (a, mut peer) = tokio::io::duplex(4096);
        let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, Config::default()).unwrap();
        peer.write_all(&[0x81, 0x00]).await.unwrap();
        assert!(ws.next().await.unwrap().is_err());
        // A close we send.
        let (a, _peer) = tokio::io::duplex(4096);
        let mut ws = WebSocketStream::from_raw_socket(a, Role::Client, Config::default()).unwrap();
        ws.feed(wavesock::Message::Close(None)).await.unwrap();
    });
    let lines = recorder.lines.lock().unwrap().clone();
    let find = |needle: &str| lines.iter().find(|l| l.contains(needle)).cloned();
    let received = find("close frame received").expect("close event");
    assert!(
        received.starts_with("websocket |"),
        "inside the connection span: {received}"
    );
    assert!(received.contains("CloseCode(1000)"), "{received}");
    let failed = find("failing the connection").expect("error event");
    assert!(
        failed.contains("close_code=Some(CloseCode(1002))"),
        "{failed}"
    );
    assert!(find("close frame sent").is_some(), "{lines:?}");
}
