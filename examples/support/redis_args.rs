//! `--redis URL` and `--redis-cluster URL[,URL...]` for the chat examples:
//! one Redis, or some nodes of a Redis Cluster.

use wavesock::topics::Topics;
use wavesock::topics::redis::{LinkError, RedisLink, RedisLinkConfig};

/// Where the room's lines go across servers.
pub enum Redis {
    One(wavesock::redis::Client),
    Cluster(Vec<String>),
}

impl Redis {
    /// The value of `flag` (`--redis` or `--redis-cluster`), or why not.
    pub fn parse(flag: &str, value: Option<String>) -> Result<Redis, String> {
        let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
        match flag {
            "--redis" => wavesock::redis::Client::open(value.as_str())
                .map(Redis::One)
                .map_err(|e| format!("bad Redis URL {value}: {e}")),
            _ => Ok(Redis::Cluster(
                value.split(',').map(str::to_owned).collect(),
            )),
        }
    }

    /// Links `topics` with `config`.
    pub fn link(self, topics: &Topics, config: RedisLinkConfig) -> Result<RedisLink, LinkError> {
        match self {
            Redis::One(client) => topics.link_redis(client, config),
            Redis::Cluster(nodes) => topics.link_redis_cluster(nodes, config),
        }
    }
}
