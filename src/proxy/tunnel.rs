//! The async driver of a proxy tunnel: it sends the messages that
//! `http.rs` and `socks5.rs` build and reads the answers they check,
//! reading no more than each answer's cap so that nothing of the tunnel is
//! consumed.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::config::{Protocol, Server};
use super::{http, socks5};
use crate::error::{ConnectError, Error, Result};
use crate::head::{HeadError, read_head};
use crate::retry::Retrying;

const PROXY_CLOSED: &str = "the proxy closed the connection while opening the tunnel";

/// Asks the proxy at the other end of `io` for a tunnel to `host:port`.
/// On success `io` carries the tunnel, with nothing of it read yet.
pub(crate) async fn tunnel<S>(
    io: &mut S,
    proxy: &Server,
    host: &str,
    port: u16,
    max_head: usize,
) -> Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let result = match proxy.protocol {
        Protocol::Http => http_tunnel(&mut Retrying(io), proxy, host, port, max_head).await,
        Protocol::Socks5 => socks5_tunnel(&mut Retrying(io), proxy, host, port).await,
    };
    result.map_err(|e| match e {
        // The proxy hung up mid-negotiation: its fault, not a transport one.
        Error::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            ConnectError::ProxyProtocol(PROXY_CLOSED).into()
        }
        e => e,
    })
}

async fn http_tunnel<S>(
    io: &mut S,
    proxy: &Server,
    host: &str,
    port: u16,
    max_head: usize,
) -> Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    io.write_all(&http::connect_request(host, port, proxy.auth.as_ref()))
        .await?;
    io.flush().await?;
    let mut buf = BytesMut::with_capacity(512);
    let ((), head_len) = read_head(io, &mut buf, max_head, |b| {
        http::parse_response(b).map(|parsed| parsed.map(|len| ((), len)))
    })
    .await
    .map_err(|e| match e {
        HeadError::Parse(e) => e,
        HeadError::TooLarge => {
            ConnectError::ProxyProtocol("the proxy's answer exceeds max_handshake_size").into()
        }
        HeadError::Eof => ConnectError::ProxyProtocol(PROXY_CLOSED).into(),
        HeadError::Io(e) => Error::Io(e),
    })?;
    // A WebSocket or TLS server waits for the client to speak first, so
    // nothing may follow the proxy's answer yet.
    if buf.len() > head_len {
        return Err(
            ConnectError::ProxyProtocol("the proxy sent data after its CONNECT answer").into(),
        );
    }
    Ok(())
}

async fn socks5_tunnel<S>(io: &mut S, proxy: &Server, host: &str, port: u16) -> Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let auth = proxy.auth.as_ref();
    // Built first: a host the protocol cannot carry fails before any I/O.
    let request = socks5::connect_request(host, port)?;
    io.write_all(&socks5::greeting(auth.is_some())).await?;
    io.flush().await?;
    let mut reply = [0u8; 2];
    io.read_exact(&mut reply).await?;
    if socks5::chosen_method(reply, auth.is_some())? == socks5::Method::UsernamePassword {
        // chosen_method only picks this when credentials were offered.
        let creds = auth.ok_or(ConnectError::ProxyProtocol(
            "the SOCKS5 proxy picked a method that was not offered",
        ))?;
        io.write_all(&socks5::auth_request(creds)?).await?;
        io.flush().await?;
        io.read_exact(&mut reply).await?;
        socks5::auth_status(reply)?;
    }
    io.write_all(&request).await?;
    io.flush().await?;
    let mut head = [0u8; 4];
    io.read_exact(&mut head).await?;
    // The bound address the proxy reports is of no use to a client; it is
    // read only to leave the tunnel at its first byte.
    let rest = match socks5::reply_head(head)? {
        Some(n) => n,
        None => usize::from(io.read_u8().await?) + 2,
    };
    let mut bound = [0u8; 255 + 2];
    io.read_exact(&mut bound[..rest]).await?;
    Ok(())
}
