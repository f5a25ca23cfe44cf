//! Where a topic's channel lives: one Redis, or the master of its slot in
//! a Redis Cluster (sharded pub/sub).

use redis::{ConnectionAddr, ConnectionInfo, Value};

/// The Redis servers a link talks to.
#[derive(Debug, Clone)]
pub(super) enum Target {
    /// One Redis: `PUBLISH`, `SUBSCRIBE`.
    Single(ConnectionInfo),
    /// A cluster, known by some of its nodes: `SPUBLISH`, `SSUBSCRIBE` on
    /// the master of each channel's slot.
    Cluster(Vec<ConnectionInfo>),
}

/// The masters of the moment and which slots each serves.
#[derive(Debug)]
pub(super) struct Topology {
    pub(super) nodes: Vec<ConnectionInfo>,
    /// Slot ranges and the index of their master in `nodes`, by start;
    /// empty for a single Redis.
    slots: Vec<(u16, u16, usize)>,
    pub(super) sharded: bool,
}

/// Slots of a Redis Cluster.
const SLOTS: u16 = 16384;

impl Topology {
    /// The node a channel lives on.
    pub(super) fn node_of(&self, channel: &str) -> Option<usize> {
        if !self.sharded {
            return Some(0);
        }
        let slot = slot(channel.as_bytes());
        self.slots
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, node)| *node)
    }

    /// The commands to publish, subscribe and unsubscribe with.
    pub(super) fn commands(&self) -> (&'static str, &'static str, &'static str) {
        if self.sharded {
            ("SPUBLISH", "SSUBSCRIBE", "SUNSUBSCRIBE")
        } else {
            ("PUBLISH", "SUBSCRIBE", "UNSUBSCRIBE")
        }
    }
}

/// Learns the topology: for a cluster, `CLUSTER SLOTS` from the first
/// seed that answers, every slot served by a master (else an error: the
/// cluster is failing over).
pub(super) async fn discover(
    target: &Target,
    timeout: std::time::Duration,
) -> Result<Topology, String> {
    let seeds = match target {
        Target::Single(info) => {
            return Ok(Topology {
                nodes: vec![info.clone()],
                slots: Vec::new(),
                sharded: false,
            });
        }
        Target::Cluster(seeds) => seeds,
    };
    let mut last = "no cluster node given".to_owned();
    for seed in seeds {
        let ask = async {
            let client = redis::Client::open(seed.clone())?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async::<Value>(&mut conn)
                .await
        };
        let answer = match tokio::time::timeout(timeout, ask).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                last = e.to_string();
                continue;
            }
            Err(_) => {
                last = "asking the cluster's slots timed out".to_owned();
                continue;
            }
        };
        match topology(seed, &answer) {
            Ok(t) => return Ok(t),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The topology `CLUSTER SLOTS` answered, with `seed`'s settings (user,
/// password, protocol) for every node.
fn topology(seed: &ConnectionInfo, answer: &Value) -> Result<Topology, String> {
    let Value::Array(ranges) = answer else {
        return Err("CLUSTER SLOTS answered something else than ranges".to_owned());
    };
    let mut nodes: Vec<ConnectionInfo> = Vec::new();
    let mut slots = Vec::new();
    for range in ranges {
        let Value::Array(parts) = range else {
            return Err("a CLUSTER SLOTS range is not an array".to_owned());
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            return Err("a CLUSTER SLOTS range lacks its master".to_owned());
        };
        let host = match master.first() {
            Some(Value::BulkString(h)) => String::from_utf8_lossy(h).into_owned(),
            Some(Value::SimpleString(h)) => h.clone(),
            _ => return Err("a master without a host".to_owned()),
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return Err("a master without a port".to_owned());
        };
        // An empty host is the node we asked, under its own address.
        let host = match (&host[..], &seed.addr) {
            ("" | "?", ConnectionAddr::Tcp(h, _)) => h.clone(),
            _ => host,
        };
        let mut info = seed.clone();
        info.addr = ConnectionAddr::Tcp(host, *port as u16);
        let index = match nodes.iter().position(|n| n.addr == info.addr) {
            Some(i) => i,
            None => {
                nodes.push(info);
                nodes.len() - 1
            }
        };
        slots.push((*start as u16, *end as u16, index));
    }
    slots.sort_unstable();
    let mut next = 0u32;
    for (start, end, _) in &slots {
        if u32::from(*start) != next {
            return Err(format!("slot {next} has no master"));
        }
        next = u32::from(*end) + 1;
    }
    if next != u32::from(SLOTS) {
        return Err(format!("slot {next} has no master"));
    }
    Ok(Topology {
        nodes,
        slots,
        sharded: true,
    })
}

/// A key's slot in a Redis Cluster: CRC16 (XMODEM) of the key, or of its
/// hash tag (what is between the first `{` and the next `}`, if not
/// empty), modulo 16 384: the cluster specification's rule.
pub(super) fn slot(key: &[u8]) -> u16 {
    let key = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(key) % SLOTS
}

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_cluster_specification() {
        // The specification's check value, and slots CLUSTER KEYSLOT gave
        // on redis-server 7.0.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"a"), 15495);
        assert_eq!(slot(b"{user1}.a"), 8106);
        assert_eq!(slot(b"user1"), 8106);
        assert_eq!(slot(b"x{a}{b}"), 15495, "the first tag");
        assert_eq!(slot(b"a{}b"), 13694, "an empty tag: the whole key");
        assert_eq!(slot(b"{}"), 15257);
        assert_eq!(slot(b"a{b"), slot(b"a{b"), "an open tag: the whole key");
    }

    fn info(port: u16) -> ConnectionInfo {
        let mut i: ConnectionInfo = format!("redis://127.0.0.1:{port}/").parse().unwrap();
        i.redis.password = Some("secret".into());
        i
    }

    fn range(start: i64, end: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(start),
            Value::Int(end),
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ]),
        ])
    }

    #[test]
    fn cluster_slots_become_a_map_of_masters_with_the_seeds_settings() {
        let answer = Value::Array(vec![
            range(10923, 16383, "127.0.0.1", 7002),
            range(0, 5460, "127.0.0.1", 7000),
            range(5461, 10922, "", 7001),
        ]);
        let t = topology(&info(7001), &answer).unwrap();
        assert_eq!(t.nodes.len(), 3);
        assert!(
            t.nodes
                .iter()
                .all(|n| n.redis.password.as_deref() == Some("secret"))
        );
        let port = |channel: &str| match &t.nodes[t.node_of(channel).unwrap()].addr {
            ConnectionAddr::Tcp(_, p) => *p,
            other => panic!("{other:?}"),
        };
        assert_eq!(port("foo"), 7002, "slot 12182");
        assert_eq!(port("{user1}.a"), 7001, "slot 8106");
        assert_eq!(port("123456789"), 7002, "slot 12739");
        assert_eq!(t.commands().1, "SSUBSCRIBE");
    }

    #[test]
    fn a_cluster_with_a_slot_without_master_is_not_ready() {
        let answer = Value::Array(vec![
            range(0, 5460, "127.0.0.1", 7000),
            range(10923, 16383, "127.0.0.1", 7002),
        ]);
        let err = topology(&info(7000), &answer).unwrap_err();
        assert!(err.contains("slot 5461"), "{err}");
        let answer = Value::Array(vec![range(0, 16000, "127.0.0.1", 7000)]);
        assert!(topology(&info(7000), &answer).is_err());
        assert!(topology(&info(7000), &Value::Nil).is_err());
    }
}
