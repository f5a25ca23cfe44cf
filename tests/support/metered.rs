//! `metrics-util`'s debugging recorder, installed for the process, and its
//! values read by name and labels. Its snapshots take what was recorded
//! since the last one (counters and gauges swapped to zero, histograms
//! emptied), so every read here first adds a snapshot to what earlier
//! ones held: counters and the gauges wavesock moves up and down are the
//! sums, histograms every value recorded. The recorder is the process's:
//! a test that reads it calls `child::alone()` first, so that the values
//! are its own.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// A metric's name and labels (sorted).
type Id = (String, Vec<(String, String)>);

/// The process's recorder, and everything it recorded.
pub struct Metrics {
    snapshotter: Snapshotter,
    values: Mutex<Values>,
}

#[derive(Default)]
struct Values {
    counters: HashMap<Id, u64>,
    gauges: HashMap<Id, f64>,
    histograms: HashMap<Id, Vec<f64>>,
    described: HashMap<String, String>,
}

/// Installs the recorder (once per process) and describes wavesock's
/// metrics.
pub fn install() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this process");
        wavesock::meter::describe();
        Metrics {
            snapshotter,
            values: Mutex::default(),
        }
    })
}

impl Metrics {
    /// Everything recorded so far.
    fn values(&self) -> std::sync::MutexGuard<'_, Values> {
        let mut values = self.values.lock().unwrap();
        for (key, _, text, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let id = (key.name().to_owned(), labels);
            if let Some(text) = text {
                values.described.insert(id.0.clone(), text.to_string());
            }
            match value {
                DebugValue::Counter(n) => *values.counters.entry(id).or_default() += n,
                DebugValue::Gauge(g) => *values.gauges.entry(id).or_default() += g.into_inner(),
                DebugValue::Histogram(h) => values
                    .histograms
                    .entry(id)
                    .or_default()
                    .extend(h.into_iter().map(|x| x.into_inner())),
            }
        }
        values
    }

    /// The sum of the counters `name` with (at least) these labels.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let values = self.values();
        values
            .counters
            .iter()
            .filter(|(id, _)| matches(id, name, labels))
            .map(|(_, n)| n)
            .sum()
    }

    /// The sum of the gauges `name` with (at least) these labels (0 if
    /// never moved).
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let values = self.values();
        values
            .gauges
            .iter()
            .filter(|(id, _)| matches(id, name, labels))
            .map(|(_, g)| g)
            .sum()
    }

    /// Every value recorded into the histograms `name` with (at least)
    /// these labels.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let values = self.values();
        values
            .histograms
            .iter()
            .filter(|(id, _)| matches(id, name, labels))
            .flat_map(|(_, h)| h.iter().copied())
            .collect()
    }

    /// The gauges among `names`, with their labels, that are not 0.
    pub fn nonzero_gauges(&self, names: &[&str]) -> Vec<String> {
        let values = self.values();
        let mut out: Vec<String> = values
            .gauges
            .iter()
            .filter(|((name, _), g)| names.contains(&name.as_str()) && **g != 0.0)
            .map(|((name, labels), g)| format!("{name}{labels:?} = {g}"))
            .collect();
        out.sort();
        out
    }

    /// The help text `describe` gave `name` (once the metric was recorded).
    pub fn description(&self, name: &str) -> Option<String> {
        self.values().described.get(name).cloned()
    }
}

fn matches(id: &Id, name: &str, labels: &[(&str, &str)]) -> bool {
    id.0 == name
        && labels
            .iter()
            .all(|(k, v)| id.1.iter().any(|(key, value)| key == k && value == v))
}
