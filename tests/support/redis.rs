//! A real `redis-server` for the tests, started on a free port without
//! persistence, killed and started again on the same port; and a Redis
//! Cluster. Without `redis-server` (and `redis-cli` for a cluster) on the
//! PATH, `start` skips the test (see `services.rs`).
#![allow(dead_code)]

use super::services;

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running (or killed) `redis-server`.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one on a free loopback port; `None`: the test skips.
    pub fn start() -> Option<RedisServer> {
        if !installed(false) {
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = RedisServer { port, child: None };
        server.restart();
        Some(server)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills it at once (SIGKILL, as a crash): connections drop.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it (again) on its port and waits until it takes connections.
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster on loopback: three masters and a replica each, nodes
/// as children of the test (killed with it), `cluster-node-timeout`
/// 1 000 ms so that a replica takes over a dead master within seconds.
pub struct RedisCluster {
    dir: std::path::PathBuf,
    pub ports: Vec<u16>,
    children: Vec<Option<Child>>,
}

impl RedisCluster {
    /// Starts one; `None`: the test skips.
    pub fn start() -> Option<RedisCluster> {
        if !installed(true) {
            return None;
        }
        let base = free_base();
        let dir = std::env::temp_dir().join(format!("wavesock-cluster-{base}"));
        let _ = std::fs::remove_dir_all(&dir);
        let ports: Vec<u16> = (base..base + 6).collect();
        let mut cluster = RedisCluster {
            dir,
            ports: ports.clone(),
            children: Vec::new(),
        };
        for &port in &ports {
            let dir = cluster.dir.join(port.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server");
            cluster.children.push(Some(child));
        }
        for &port in &ports {
            wait_for_port(port);
        }
        let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli");
        assert!(created.success(), "redis-cli --cluster create failed");
        for &port in &ports {
            cluster.wait_ok(port);
        }
        Some(cluster)
    }

    /// The nodes' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect()
    }

    fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the node on `port` says the cluster is ok.
    pub fn wait_ok(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self
            .cli(port, &["cluster", "info"])
            .contains("cluster_state:ok")
        {
            assert!(Instant::now() < deadline, "cluster not ok on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The port of the master serving `key`'s slot.
    pub fn master_of(&self, key: &str) -> u16 {
        let slot: u16 = self
            .cli(self.ports[0], &["cluster", "keyslot", key])
            .trim()
            .parse()
            .expect("a slot");
        for line in self.cli(self.ports[0], &["cluster", "nodes"]).lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            for range in &f[8..] {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) else {
                    continue;
                };
                if (a..=b).contains(&slot) {
                    let addr = f[1].split('@').next().unwrap();
                    return addr.rsplit(':').next().unwrap().parse().unwrap();
                }
            }
        }
        panic!("no master for slot {slot}");
    }

    /// Kills the master on `port` (SIGKILL) and has its replica take over
    /// at once (`CLUSTER FAILOVER TAKEOVER`); waits until the cluster is ok
    /// again on the other nodes. The port of the new master.
    pub fn fail_over(&mut self, port: u16) -> u16 {
        let id = self.cli(port, &["cluster", "myid"]).trim().to_owned();
        let replicas = self.cli(port, &["cluster", "replicas", &id]);
        let replica: u16 = replicas
            .split_whitespace()
            .nth(1)
            .and_then(|a| a.split('@').next())
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .expect("a replica");
        let at = self.ports.iter().position(|p| *p == port).unwrap();
        if let Some(mut child) = self.children[at].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.cli(replica, &["cluster", "failover", "takeover"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.cli(replica, &["role"]).starts_with("master") {
            assert!(Instant::now() < deadline, "{replica} did not take over");
            std::thread::sleep(Duration::from_millis(20));
        }
        for &p in self.ports.iter().filter(|p| **p != port) {
            self.wait_ok(p);
        }
        replica
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Six consecutive free ports whose cluster bus ports (+10 000) are free,
/// apart from every other cluster of this process (tests run at once).
fn free_base() -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    let start = (std::process::id() % 200) as u16 * 100;
    loop {
        let i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        assert!(i < 400, "six free ports");
        let base = 20000 + (start + i * 50) % 20000;
        if (base..base + 6).all(|p| free(p) && free(p + 10000)) {
            return base;
        }
    }
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `redis-server` (and `redis-cli`, for a cluster) can be run;
/// if not, the test skips or, under `WAVESOCK_TEST_SERVICES=require`,
/// fails.
fn installed(cluster: bool) -> bool {
    let found = services::on_path("redis-server") && (!cluster || services::on_path("redis-cli"));
    services::available(
        "redis-server",
        found,
        "redis-server on the PATH: the Debian or Ubuntu package redis-server, or Homebrew's redis",
    )
}
