//! One model, every engine, real sockets: generated client scripts run
//! over loopback TCP against the Stream (a task per connection), the
//! split Stream (halves in two tasks) and the hub with each readiness
//! (its own poller, Tokio's), and each transcript is compared with a model
//! of what RFC 6455 and wavesock's documented rules say must happen.
//!
//! A script (`support/model/script.rs`) is one to three clients, each a
//! handshake (good, slow, or one to refuse), steps (frames of every kind
//! written in arbitrary pieces: data messages fragmented anywhere with
//! pings between the fragments, ping bursts, pongs, the text `close` on
//! which the echo server closes, the client's close, violations, invalid
//! UTF-8, oversize frames and messages; sync points; stopped readers;
//! pauses) and an end (a close, FIN, a reset, the answer to the server's
//! close, FIN or a reset in the middle of a frame). With the `deflate`
//! feature, some scripts run with permessage-deflate under each of the
//! server's policies: the clients compress (with or without context
//! takeover, as negotiated), send RSV1 where it is refused, data that does
//! not inflate and messages that inflate past the limit. The model
//! (`support/model/reference.rs`) reads the same frames and says what
//! must come back: each message echoed in order, a pong for each ping,
//! the close frame (the client's echoed, 4000 for ours, 1002, 1007 or 1009 for a
//! refusal, none for a FIN) and how the server's side ends. Where the
//! model leaves a choice, the engines must still make it alike (a
//! refusal's status, a failure's close reason). Differences the docs
//! name are allowed, and only those: the split Stream's echo and close go
//! out from another task, which the end may beat.
//!
//! Every engine writes what the protocol core owes after each frame, so
//! the bound on pongs owed at once (16, past which a ping's pong takes the
//! place of the newest owed: the model states it, it imports nothing from
//! the library) never shows over a socket. Each script's pings therefore
//! also go to the core alone (`support/model/core.rs`), under a caller
//! that takes what it owes only at the end of each of the client's writes
//! and holds the close the text `close` asks for to then, and the pongs
//! it gives must be the model's exactly.
//!
//! Topic scripts (`support/model/topics.rs`) run beside them, for a fifth
//! of `HARNESS_SECS`: clients that subscribe, publish and unsubscribe in
//! phases, against the hub under each readiness and each backpressure
//! policy, the hub given connections upgraded elsewhere (adopted), the
//! hub behind a `Router`'s route, and Streams serving `Topics::subscribe`'s
//! receivers; checked for what each subscriber is owed, nothing it is not,
//! one order per topic, no reader closed, and no topic left once every
//! connection ended. With the `metrics` feature, scripts of both kinds run
//! alone in a child process and the gauges of what is open, held or
//! waiting must be back to 0.
//!
//! After each script: every opened connection's end reported exactly
//! once, no accepted socket left open, the memory budget (some scripts
//! have one) back to 0 and never past its limit, no panic.
//!
//! `cargo test --test hub model::` runs scripts for about 45 s
//! (`HARNESS_SECS` sets how long; `HARNESS_SEED` replays a run, whose
//! seed is printed; `HARNESS_QUICK=1` stops at the first failing script
//! unshrunk). A failing script is shrunk and its seed kept in
//! `tests/proptest-regressions/model.txt` (proptest's default place: the
//! binary's `main.rs` is in `tests/hub/`), replayed first on every run.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use proptest::test_runner::{
    Config as ProptestConfig, FailurePersistence, PersistedSeed, RngAlgorithm, TestCaseError,
    TestError, TestRng, TestRunner,
};

use crate::support::model as harness;

use harness::Runtime;
use harness::script::*;

/// How long the generated scripts run by default.
const DEFAULT_SECS: u64 = 45;

fn harness_secs() -> u64 {
    std::env::var("HARNESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SECS)
}

fn harness_seed() -> u64 {
    std::env::var("HARNESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        })
}

/// Keeps failures, replays none.
#[derive(Debug)]
struct SaveOnly(Box<dyn FailurePersistence>);

impl FailurePersistence for SaveOnly {
    fn load_persisted_failures2(&self, _: Option<&'static str>) -> Vec<PersistedSeed> {
        Vec::new()
    }

    fn save_persisted_failure2(
        &mut self,
        source_file: Option<&'static str>,
        seed: PersistedSeed,
        shrunken_value: &dyn std::fmt::Debug,
    ) {
        self.0
            .save_persisted_failure2(source_file, seed, shrunken_value)
    }

    fn box_clone(&self) -> Box<dyn FailurePersistence> {
        Box::new(SaveOnly(self.0.box_clone()))
    }

    fn eq(&self, other: &dyn FailurePersistence) -> bool {
        other
            .as_any()
            .downcast_ref::<SaveOnly>()
            .is_some_and(|o| FailurePersistence::eq(&*self.0, &*o.0))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Whether a run stops at its first failing script, neither shrinking it
/// nor keeping its seed: `HARNESS_QUICK=1`, for a run that only asks
/// whether the harness fails (`scripts/mutants.py`).
fn quick() -> bool {
    std::env::var("HARNESS_QUICK").is_ok_and(|v| v == "1")
}

/// Whether a run goes on after a failing script (shrunk and reported),
/// to find more: `HARNESS_KEEP_GOING=1`.
fn keep_going() -> bool {
    std::env::var("HARNESS_KEEP_GOING").is_ok_and(|v| v == "1")
}

#[test]
fn generated_scripts_follow_the_model_on_every_engine() {
    let secs = harness_secs();
    let seed = harness_seed();
    eprintln!("model: seed {seed} (HARNESS_SEED={seed} replays it), {secs} s of scripts");
    let rt = Runtime::new("generated");
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let ran = AtomicUsize::new(0);
    let mut failures = Vec::new();
    // One runner per round: a round ends at the deadline or at a failing
    // script, once shrunk; with `keep_going` the next round goes on from
    // another seed.
    for round in 0u64.. {
        let failed = AtomicBool::new(false);
        let mut config = ProptestConfig {
            cases: u32::MAX,
            // The round ends on the first case rejected, which the
            // deadline makes (see below): runs are bounded by time.
            max_global_rejects: 0,
            max_shrink_iters: 1024,
            max_shrink_time: 300_000,
            source_file: Some(file!()),
            ..ProptestConfig::default()
        };
        if quick() {
            config.max_shrink_iters = 0;
            config.failure_persistence = None;
        }
        // The failures kept from earlier runs are replayed by the first
        // round only; every round keeps its own.
        if round > 0 && !quick() {
            config.failure_persistence = config
                .failure_persistence
                .map(|p| Box::new(SaveOnly(p)) as Box<dyn FailurePersistence>);
        }
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..16].copy_from_slice(&round.to_le_bytes());
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &key));
        let result = runner.run(&script(), |script| {
            // Past the deadline no new script starts; shrinking a failure
            // goes on (a rejected case counts as a pass there).
            if !failed.load(Ordering::SeqCst) && Instant::now() > deadline {
                return Err(TestCaseError::reject("time is up"));
            }
            ran.fetch_add(1, Ordering::SeqCst);
            rt.run(&script, true).map_err(|e| {
                if !failed.swap(true, Ordering::SeqCst) {
                    eprintln!(
                        "model: a script failed (seed {seed}, round {round}):\n{e}\n{script:#?}\n"
                    );
                }
                TestCaseError::fail(e)
            })
        });
        match result {
            Ok(()) => break,
            Err(TestError::Abort(_)) if !failed.load(Ordering::SeqCst) => break,
            Err(e) => {
                eprintln!("model: seed {seed}, round {round}: {e}");
                failures.push(format!("seed {seed}, round {round}: {e}"));
                if !keep_going() || Instant::now() > deadline {
                    break;
                }
            }
        }
    }
    let n = ran.load(Ordering::SeqCst);
    let elapsed = started.elapsed();
    eprintln!(
        "model: {n} scripts in {:.1} s: {:.0} scripts per minute, {} failing",
        elapsed.as_secs_f64(),
        n as f64 * 60.0 / elapsed.as_secs_f64().max(0.001),
        failures.len()
    );
    eprintln!("model: the clients' endings: {}", harness::endings());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// ------------------------------------------------------------------------
// The bugs of issue 47, as scripts. Each failed before its fix on some
// engine; here they run on every engine against the model.

fn run(name: &str, script: Script) {
    let rt = Runtime::new(name);
    if let Err(e) = rt.run(&script, false) {
        panic!("{name}:\n{e}");
    }
}

/// A message, then FIN in the same burst: answered, then the end read
/// (the owned poller once took the short read for "nothing more" and
/// never read the FIN).
#[test]
fn data_then_fin() {
    for unit in [Unit::text(2), Unit::Ping(1), Unit::Pong(1)] {
        run(
            "data-then-fin",
            Script::one(Client::new(vec![Step::write(vec![unit])], End::Fin)),
        );
    }
}

/// The upgrade request and FIN, without waiting for the 101: answered,
/// and the end that came with the request ends the connection.
#[test]
fn handshake_then_fin() {
    let client = Client {
        handshake: Handshake::Good {
            cuts: vec![],
            pause_ms: 0,
            wait: false,
        },
        ..Client::new(vec![], End::Fin)
    };
    run("handshake-then-fin", Script::one(client));
}

/// The upgrade request, a message and a ping, and FIN in one burst: the
/// echo and the pong go out before the end, on the hub too (it answered
/// them, then found the FIN in the read that followed and discarded the
/// answers unsent).
#[test]
fn frames_that_came_with_the_request_then_fin() {
    let client = Client {
        handshake: Handshake::Good {
            cuts: vec![],
            pause_ms: 0,
            wait: false,
        },
        ..Client::new(
            vec![Step::write(vec![Unit::text(2), Unit::Ping(0)])],
            End::Fin,
        )
    };
    run("pipelined-fin", Script::one(client));
}

/// A reset after a message was echoed: the server's side ends.
#[test]
fn rst_after_data() {
    let steps = vec![
        Step::write(vec![Unit::text(2)]),
        Step::Sync,
        Step::write(vec![Unit::Pong(0)]),
    ];
    run("rst-after-data", Script::one(Client::new(steps, End::Rst)));
}

/// A flood of pings behind the text `close`: no pong before our close on
/// an engine but the split Stream, and from the core under a caller that
/// holds that close to the end of the read, the first 15 pings' pongs and
/// the newest's; then the client's answer.
#[test]
fn ping_flood_behind_a_close() {
    let steps = vec![Step::write(vec![Unit::ServerClose, Unit::Pings(54_567)])];
    run("ping-flood", Script::one(Client::new(steps, End::Answer)));
}

/// The budget's accounting with every byte counted and messages that
/// span the hub's smallest reads: back to 0 after a large message.
#[test]
fn budget_back_to_zero_after_large_messages() {
    let steps = vec![Step::write(vec![
        Unit::Data {
            text: false,
            len: MAX_MESSAGE as u32,
            seed: 1,
            frags: vec![1 << 14, 1 << 15],
            pings: vec![(1 << 15, 4)],
            compress: false,
        },
        Unit::text(3000),
    ])];
    run(
        "budget",
        Script {
            setup: Setup {
                budget: Budget::Counted,
                small_hub_reads: true,
                deflate: Deflate::Off,
            },
            clients: vec![Client::new(steps, End::Close(1000))],
        },
    );
}

// ------------------------------------------------------------------------
// Findings of this harness: the hub decoded on past the message its
// handler closed on, and what it read then replaced the close it held to
// the end of the turn. It now reads nothing more until that close is out.

/// The text `close` and a frame the core refuses in one read: the Stream
/// sends its close (4000) as the message is read, and nothing after; the
/// hub, which holds its close to the end of the turn, decodes on and
/// fails the connection with 1002 instead, though what the same read
/// brought after the closing message is documented as dropped unheard.
#[test]
fn hub_refusal_after_close_replaces_the_close() {
    let steps = vec![Step::write(vec![
        Unit::ServerClose,
        Unit::Bad(Violation::FragmentedPing),
    ])];
    run(
        "refusal-after-close",
        Script::one(Client::new(steps, End::Close(1000))),
    );
}

/// The text `close` and then the client's own close frame, in one burst:
/// the Stream sends its close (4000) as the message is read and takes the
/// client's as the answer; the hub, which holds its close to the end of
/// the turn, reads the client's close first and echoes it instead (1000
/// "bye"), so the close the handler asked for never goes out.
#[test]
fn hub_answers_a_close_read_before_its_own_went_out() {
    let steps = vec![Step::write(vec![Unit::ServerClose])];
    let client = Client {
        handshake: Handshake::Good {
            cuts: vec![],
            pause_ms: 0,
            wait: false,
        },
        ..Client::new(steps, End::Close(1000))
    };
    run("close-after-close", Script::one(client));
}

/// A message, the text `close` and FIN in one burst: the Stream echoes,
/// sends its close (4000) and takes the FIN as the answer, a clean end
/// (the guide's "Closing"); the hub reads the FIN before its close, held
/// to the end of the turn, goes out, and drops the close: no close frame,
/// and the end reported as an I/O error.
#[test]
fn hub_drops_its_close_when_fin_comes_in_the_same_turn() {
    let steps = vec![Step::write(vec![Unit::text(3), Unit::ServerClose])];
    run("close-then-fin", Script::one(Client::new(steps, End::Fin)));
}

// ------------------------------------------------------------------------
// Topics: subscribe, publish, unsubscribe in phases, on the hub under
// both readiness modes and both backpressure policies and on Streams
// (`support/model/topics.rs` says what is checked).

/// The part of `HARNESS_SECS` the topic scripts take, beside the echo
/// scripts (the two run at once): the suite's time stays what it was.
const TOPIC_SHARE: u64 = 5;

#[test]
fn generated_topic_scripts_follow_the_model_on_every_engine() {
    let secs = (harness_secs() / TOPIC_SHARE).max(1);
    let seed = harness_seed();
    let bursts = harness::topics::bursts();
    eprintln!(
        "model, topics: seed {seed} (HARNESS_SEED={seed} replays it), {secs} s of scripts, \
         bursts {}",
        if bursts {
            "in every script"
        } else {
            "in a third of the scripts (HARNESS_TOPIC_BURSTS=1: every one)"
        }
    );
    let rt = Runtime::new("topics");
    let deadline = Instant::now() + Duration::from_secs(secs);
    let ran = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let config = ProptestConfig {
        cases: u32::MAX,
        max_global_rejects: 0,
        max_shrink_iters: if quick() { 0 } else { 256 },
        max_shrink_time: 120_000,
        // Replayed from the printed seed rather than kept: the file
        // proptest keeps seeds in is the echo scripts'.
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8] = 0x70;
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &key));
    let result = runner.run(&harness::topics::topic_script(), |script| {
        if !failed.load(Ordering::SeqCst) && Instant::now() > deadline {
            return Err(TestCaseError::reject("time is up"));
        }
        ran.fetch_add(1, Ordering::SeqCst);
        rt.run_topics(&script).map_err(|e| {
            if !failed.swap(true, Ordering::SeqCst) {
                eprintln!("model: a script failed (topics, seed {seed}):\n{e}\n{script:?}\n");
            }
            TestCaseError::fail(e)
        })
    });
    eprintln!(
        "model, topics: {} scripts, {}",
        ran.load(Ordering::SeqCst),
        if failed.load(Ordering::SeqCst) {
            "failing"
        } else {
            "none failing"
        }
    );
    match result {
        Ok(()) => {}
        Err(TestError::Abort(_)) if !failed.load(Ordering::SeqCst) => {}
        Err(e) => panic!("topics, seed {seed}: {e}"),
    }
}

fn run_topics(name: &str, script: harness::topics::TopicScript) {
    let rt = Runtime::new(name);
    if let Err(e) = rt.run_topics(&script) {
        panic!("{name}:\n{e}");
    }
}

/// One subscriber, and a publisher that publishes a dozen a phase for
/// nineteen phases: more than a hub engine's inbox holds in all (160 in
/// these scripts), each phase's delivered before the next. Every publish
/// arrives, under either policy: what is delivered gives its room back.
#[test]
fn an_inbox_gives_its_room_back_as_publishes_are_delivered() {
    use harness::topics::{Act, Policy, TopicScript};
    let phases = 20;
    let subscriber: Vec<Vec<Act>> = (0..phases)
        .map(|p| if p == 0 { vec![Act::Sub(0)] } else { vec![] })
        .collect();
    let publisher: Vec<Vec<Act>> = (0..phases)
        .map(|p| {
            if p == 0 {
                vec![]
            } else {
                vec![Act::Pub(0, 12, 16)]
            }
        })
        .collect();
    for policy in [Policy::Close, Policy::Drop] {
        run_topics(
            "inbox-room",
            TopicScript {
                policy,
                burst: false,
                clients: vec![subscriber.clone(), publisher.clone()],
            },
        );
    }
}

// ------------------------------------------------------------------------
// Metrics: after scripts of both kinds on every engine, every gauge that
// counts what is open, held or waiting is back to 0.

/// The gauges README's metrics table has fall back to 0 once nothing is
/// open: named here as documented, not imported.
#[cfg(feature = "metrics")]
const GAUGES_BACK_TO_ZERO: [&str; 6] = [
    "wavesock_connections_open",
    "wavesock_write_blocked_connections",
    "wavesock_write_blocked_bytes",
    "wavesock_budget_in_use_bytes",
    "wavesock_topics",
    "wavesock_topic_subscriptions",
];

/// The part of `HARNESS_SECS` each kind of script takes here.
#[cfg(feature = "metrics")]
const METRICS_SHARE: u64 = 9;

#[cfg(feature = "metrics")]
#[test]
fn gauges_are_back_to_zero_after_scripts_on_every_engine() {
    use proptest::strategy::{Strategy, ValueTree};

    // The recorder is the process's: counted alone, in a child process.
    if !crate::support::child::alone() {
        return;
    }
    let m = crate::support::metered::install();
    let secs = (harness_secs() / METRICS_SHARE).max(1);
    let seed = harness_seed();
    eprintln!("model, metrics: seed {seed}, {secs} s of each kind of script");
    let rt = Runtime::new("metrics");
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8] = 0x6d;
    let mut r = TestRunner::new_with_rng(
        ProptestConfig {
            failure_persistence: None,
            ..ProptestConfig::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &key),
    );
    let mut findings = Vec::new();
    for (kind, deadline) in [("echo", secs), ("topics", secs)] {
        let until = Instant::now() + Duration::from_secs(deadline);
        let mut n = 0;
        while Instant::now() < until {
            let outcome = if kind == "echo" {
                let s = script().new_tree(&mut r).unwrap().current();
                rt.run(&s, true)
            } else {
                let s = harness::topics::topic_script()
                    .new_tree(&mut r)
                    .unwrap()
                    .current();
                rt.run_topics(&s)
            };
            n += 1;
            if let Err(e) = outcome {
                findings.push(format!("a {kind} script failed: {e}"));
                break;
            }
        }
        eprintln!("model, metrics: {n} {kind} scripts");
    }
    // The Streams' tasks report their ends as they finish: a bound, not a
    // sleep, before the gauges are read.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut left = m.nonzero_gauges(&GAUGES_BACK_TO_ZERO);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        left = m.nonzero_gauges(&GAUGES_BACK_TO_ZERO);
    }
    if !left.is_empty() {
        findings.push(format!("gauges not back to 0: {}", left.join(", ")));
    }
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}
