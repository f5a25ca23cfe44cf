//! The model-based harness of `tests/hub/model.rs`: generated client
//! scripts run over loopback against every engine, each transcript
//! compared with the model and with the other engines, and each server's
//! resources checked after.
#![allow(dead_code)]

pub mod check;
pub mod client;
pub mod core;
pub mod plan;
pub mod reference;
pub mod script;
pub mod server;
pub mod topics;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use check::Seen;
use plan::Plan;
use script::Script;
use server::{ENGINES, Engine};

/// After the servers reported every end: how long to wait for a report
/// that should not come (a second end).
const GRACE: Duration = Duration::from_millis(50);

/// Panics on the harness's runtimes' threads, by runtime name: a panic
/// anywhere in a server is a finding, even one a task swallowed.
static PANICS: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

fn count_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some(name) = std::thread::current().name() {
                if name.starts_with("model-") {
                    let mut p = PANICS.lock().unwrap_or_else(|e| e.into_inner());
                    *p.get_or_insert_with(HashMap::new)
                        .entry(name.to_owned())
                        .or_default() += 1;
                }
            }
            previous(info);
        }));
    });
}

fn panics(name: &str) -> usize {
    let p = PANICS.lock().unwrap_or_else(|e| e.into_inner());
    p.as_ref().and_then(|p| p.get(name)).copied().unwrap_or(0)
}

/// A runtime for scripts, its worker threads named `model-{name}`.
pub struct Runtime {
    rt: tokio::runtime::Runtime,
    name: String,
}

impl Runtime {
    pub fn new(name: &str) -> Runtime {
        count_panics();
        let name = format!("model-{name}");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(name.clone())
            .enable_all()
            .build()
            .unwrap();
        Runtime { rt, name }
    }

    /// Runs `script` on every engine: `Err` with every finding. `known`
    /// tolerates the findings already reported (see [`check::client`]).
    pub fn run(&self, script: &Script, known: bool) -> Result<(), String> {
        let before = panics(&self.name);
        let result = self.rt.block_on(run_script(script, known));
        let after = panics(&self.name);
        match (result, after - before) {
            (r, 0) => r,
            (Ok(()), n) => Err(format!("{n} panic(s) in the servers (see above)")),
            (Err(e), n) => Err(format!("{e}\n{n} panic(s) in the servers (see above)")),
        }
    }
}

impl Runtime {
    /// Runs a topic script on every engine: `Err` with every finding.
    pub fn run_topics(&self, script: &topics::TopicScript) -> Result<(), String> {
        let before = panics(&self.name);
        let result = self.rt.block_on(topics::run_script(script));
        match (result, panics(&self.name) - before) {
            (r, 0) => r,
            (Ok(()), n) => Err(format!("{n} panic(s) in the servers (see above)")),
            (Err(e), n) => Err(format!("{e}\n{n} panic(s) in the servers (see above)")),
        }
    }
}

/// What one engine did with a script.
struct Run {
    engine: Engine,
    seen: Vec<Seen>,
    problems: Vec<String>,
}

async fn until(bound: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    while !f() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

async fn run_engine(engine: Engine, script: &Script, plans: &[Plan]) -> Run {
    let server = server::start(engine, &script.setup).await;
    let addr = server.addr;
    let split = engine == Engine::Split;
    let transcripts =
        futures_util::future::join_all(plans.iter().map(|p| client::run(addr, p, split))).await;
    let mut problems = Vec::new();
    // Every connection opened ends, and is reported, within the bound
    // after its client is done.
    let reports = server.reports.clone();
    let all_ended = || {
        let r = reports.lock().unwrap();
        r.opened
            .iter()
            .all(|(id, n)| r.ended.get(id).map_or(0, Vec::len) >= *n)
    };
    if !until(client::BOUND, all_ended).await {
        problems.push("a connection's end was never reported".into());
    }
    // The server lets go of every socket it accepted.
    let port = addr.port();
    if !until(client::BOUND, || server::held_sockets(port) == 0).await {
        problems.push(format!(
            "{} accepted socket(s) still open after every client is gone",
            server::held_sockets(port)
        ));
    }
    tokio::time::sleep(GRACE).await;
    if !all_ended() {
        problems.push("a connection opened after its client was gone never ended".into());
    }
    if let Some(b) = &server.budget {
        if !until(client::BOUND, || b.in_use() == 0).await {
            problems.push(format!(
                "the memory budget holds {} bytes after the end",
                b.in_use()
            ));
        }
        if b.peak() > b.limit() {
            problems.push(format!(
                "the memory budget peaked at {} over {}",
                b.peak(),
                b.limit()
            ));
        }
    }
    let seen = {
        let r = server.reports.lock().unwrap();
        problems.extend(r.strays.iter().cloned());
        transcripts
            .into_iter()
            .enumerate()
            .map(|(i, transcript)| Seen {
                transcript,
                opened: r.opened.get(&(i as u32)).copied().unwrap_or(0),
                ended: r.ended.get(&(i as u32)).cloned().unwrap_or_default(),
            })
            .collect()
    };
    if let Err(e) = server.stop().await {
        problems.push(e);
    }
    Run {
        engine,
        seen,
        problems,
    }
}

/// How the scripts run so far ended, by the model's account: what a run
/// covered.
static ENDINGS: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

fn count_ending(plan: &Plan) {
    let key = match (&plan.bad, &plan.model.ending) {
        (Some(script::Bad::Truncated(_)), _) => "refused Truncated".into(),
        (Some(b), _) => format!("refused {b:?}"),
        (None, Some(reference::Ending::Answered(_))) => "answered".into(),
        (None, Some(reference::Ending::Failed(c))) => format!("failed {c}"),
        (None, Some(reference::Ending::Ours(a))) => match a {
            reference::After::Close(_) => "ours, then close".into(),
            a => format!("ours, then {a:?}"),
        },
        (None, Some(e)) => format!("{e:?}"),
        (None, None) => "none".into(),
    };
    count(key);
}

fn count(key: String) {
    let mut e = ENDINGS.lock().unwrap_or_else(|e| e.into_inner());
    *e.get_or_insert_with(HashMap::new).entry(key).or_default() += 1;
}

/// Compressed messages the clients received (permessage-deflate at work).
static COMPRESSED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The endings counted so far, most common first, and the compressed
/// messages received.
pub fn endings() -> String {
    let compressed = COMPRESSED.load(std::sync::atomic::Ordering::Relaxed);
    let e = ENDINGS.lock().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<_> = e.iter().flatten().collect();
    v.sort_by(|a, b| b.1.cmp(a.1));
    let endings = v
        .iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!("{endings}; {compressed} compressed messages received")
}

/// Runs a script on every engine at once, and checks it all.
pub async fn run_script(script: &Script, known: bool) -> Result<(), String> {
    let plans: Vec<Plan> = script
        .clients
        .iter()
        .enumerate()
        .map(|(i, c)| plan::plan(i, c, &script.setup))
        .collect();
    plans.iter().for_each(count_ending);
    let shared = &plans;
    let runs = futures_util::future::join_all(ENGINES.iter().map(|&e| async move {
        // A hang anywhere is a finding, not a stuck test.
        match tokio::time::timeout(Duration::from_secs(60), run_engine(e, script, shared)).await {
            Ok(run) => run,
            Err(_) => Run {
                engine: e,
                seen: Vec::new(),
                problems: vec!["the script did not finish within 60 s".into()],
            },
        }
    }))
    .await;
    let compressed = runs
        .iter()
        .flat_map(|r| &r.seen)
        .flat_map(|s| &s.transcript.frames)
        .filter(|f| f.rsv == 4)
        .count();
    COMPRESSED.fetch_add(compressed, std::sync::atomic::Ordering::Relaxed);
    let mut findings = Vec::new();
    for run in &runs {
        for p in &run.problems {
            findings.push(format!("{:?}: {p}", run.engine));
        }
        for (plan, seen) in plans.iter().zip(&run.seen) {
            for f in check::client(run.engine, plan, seen, known) {
                findings.push(format!("{:?}, client {}: {f}", run.engine, plan.index));
            }
        }
    }
    for plan in &plans {
        for f in core::check(plan) {
            findings.push(format!("client {}: {f}", plan.index));
        }
        let seen: Vec<(Engine, &Seen)> = runs
            .iter()
            .filter_map(|r| Some((r.engine, r.seen.get(plan.index)?)))
            .collect();
        for f in check::agree(plan, &seen) {
            findings.push(format!("client {}: {f}", plan.index));
        }
    }
    if findings.is_empty() {
        return Ok(());
    }
    let mut report = findings.join("\n");
    for run in &runs {
        for (i, s) in run.seen.iter().enumerate() {
            report.push_str(&format!(
                "\n--- {:?}, client {i}: status {:?}, {} frames {}, end {:?} after {:?}, \
                 writes failed {:?}, opened {}, ended {:?}",
                run.engine,
                s.transcript.status,
                s.transcript.frames.len(),
                summary(&s.transcript.frames),
                s.transcript.end,
                s.transcript.end_after,
                s.transcript.write_failed,
                s.opened,
                s.ended,
            ));
        }
    }
    for plan in &plans {
        report.push_str(&format!(
            "\n--- model, client {}: ending {:?}, {} echoes, {} pings, {} late pings, trailing {}",
            plan.index,
            plan.model.ending,
            plan.model.echoes.len(),
            plan.model.pings.len(),
            plan.model.late_pings.len(),
            plan.model.trailing
        ));
    }
    Err(report)
}

/// The opcodes of a transcript, run-length coded: `1x3 10 8`.
fn summary(frames: &[client::Got]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < frames.len() {
        let op = frames[i].opcode;
        let n = frames[i..].iter().take_while(|f| f.opcode == op).count();
        if n > 1 {
            out.push_str(&format!("{op}x{n} "));
        } else {
            out.push_str(&format!("{op} "));
        }
        i += n;
    }
    out.trim_end().to_owned()
}
