//! Files of any size over WebSocket, never held in memory.
//!
//! ```sh
//! # a server that writes each message it receives to a file in DIR
//! cargo run --example stream_file -- serve 127.0.0.1:9005 /tmp/uploads
//! # a client that sends FILE as one binary message
//! cargo run --example stream_file -- send ws://127.0.0.1:9005/ big.iso
//! ```
//!
//! The client reads the file 64 KiB at a time and sends each chunk as a
//! fragment ([`WebSocketStream::send_reader`]); the write buffer bounds what
//! is in flight, so a slow server slows the reading down. The server has
//! [`Config::stream_messages`] on and copies each piece to disk as it
//! arrives ([`WebSocketStream::next_message_pieces`] through
//! [`StreamReader`]), then answers with the number of bytes it wrote. Each
//! side holds a few hundred KiB at most, whatever the file size.

use std::path::{Path, PathBuf};

use futures_util::{SinkExt, StreamExt};
use tokio::fs::File;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_util::io::StreamReader;
use wavesock::{Config, Message, OpCode, WebSocketStream};

#[tokio::main]
async fn main() -> wavesock::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["serve", addr, dir] => {
            let listener = TcpListener::bind(addr).await?;
            println!("saving uploads to {dir}, listening on ws://{addr}/");
            serve(listener, dir.into()).await
        }
        ["send", url, file] => {
            let written = send(url, Path::new(file)).await?;
            println!("the server wrote {written} bytes");
            Ok(())
        }
        _ => {
            eprintln!("usage: stream_file serve ADDR DIR | stream_file send URL FILE");
            std::process::exit(2);
        }
    }
}

/// Accepts connections for ever, saving every message into `dir`.
pub async fn serve(listener: TcpListener, dir: PathBuf) -> wavesock::Result<()> {
    tokio::fs::create_dir_all(&dir).await?;
    for conn in 0u64.. {
        let (tcp, peer) = listener.accept().await?;
        let dir = dir.clone();
        tokio::spawn(async move {
            // Pieces as they arrive; the disk, not memory, takes the total.
            let config = Config::default()
                .stream_messages(true)
                .max_message_size(usize::MAX);
            let result = async {
                let ws = wavesock::accept_async_with_config(tcp, config).await?;
                receive_files(ws, &dir, conn).await
            };
            if let Err(e) = result.await {
                eprintln!("{peer}: {e}");
            }
        });
    }
    Ok(())
}

/// Writes each message of the connection to a file of its own.
async fn receive_files<S>(mut ws: WebSocketStream<S>, dir: &Path, conn: u64) -> wavesock::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    for n in 0u64.. {
        let mut pieces = ws.next_message_pieces();
        // Wait for a message to start before making its file.
        let first = pieces.next().await.transpose()?;
        if pieces.opcode().is_none() {
            break; // the client closed
        }
        let path = dir.join(format!("upload-{conn}-{n}"));
        let mut file = File::create(&path).await?;
        let mut written = 0;
        if let Some(first) = first {
            file.write_all(&first).await?;
            written += first.len() as u64;
        }
        written += tokio::io::copy(&mut StreamReader::new(pieces), &mut file).await?;
        file.flush().await?;
        ws.send(Message::text(written.to_string())).await?;
    }
    // Finish the closing handshake.
    while ws.next().await.transpose()?.is_some() {}
    Ok(())
}

/// Sends the file at `path` as one message to the server at `url`; returns
/// the byte count the server reports.
pub async fn send(url: &str, path: &Path) -> wavesock::Result<u64> {
    let (mut ws, _) = wavesock::connect_async(url).await?;
    let file = File::open(path).await?;
    ws.send_reader(OpCode::Binary, file, 64 << 10).await?;
    let reply = loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => break t,
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e),
            None => return Err(wavesock::Error::ConnectionClosed),
        }
    };
    ws.close(None).await?;
    reply.as_str().parse().map_err(|_| {
        let bad = std::io::Error::new(std::io::ErrorKind::InvalidData, "reply is not a number");
        wavesock::Error::Io(bad)
    })
}
