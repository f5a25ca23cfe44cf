//! Messages in pieces: receiving one as a stream of byte chunks, and sending
//! one from a stream of chunks as fragments, so that a message of any size
//! passes through bounded memory.

use std::pin::{Pin, pin};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures_util::{FutureExt, Sink, SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::io::ReaderStream;

use crate::error::{Error, Result};
use crate::proto::header::OpCode;
use crate::proto::message::{Frame, Message};
use crate::stream::{WebSocketReceiver, WebSocketSender, WebSocketStream};

/// The payload of the next text or binary message, as a [`Stream`] of
/// [`Bytes`] that ends after the message's last piece.
///
/// Made by [`WebSocketStream::next_message_pieces`] and
/// [`WebSocketReceiver::next_message_pieces`]. With
/// [`Config::stream_messages`](crate::Config::stream_messages) on, each item
/// is what one read brought, so memory stays bounded whatever the message
/// size; with it off, the whole message comes as one item.
///
/// It is a `Stream`, not an `AsyncRead`: wrap it in
/// [`tokio_util::io::StreamReader`] for one ([`Error`] converts to
/// [`std::io::Error`]).
///
/// - Pings and pongs on the way are skipped (pings are still answered).
/// - Empty pieces are skipped; an empty message yields no item, but
///   [`opcode`](Self::opcode) tells that it came.
/// - If the connection ends before a message starts (a close frame, or the
///   end of the stream), the stream ends with no item and no `opcode`; the
///   next poll of the connection finishes the closing handshake. If it ends
///   in mid-message, the last item is [`Error::ConnectionClosed`] (or the
///   error that ended it).
/// - Text is checked as it comes, but an item may end inside a code point;
///   invalid UTF-8 fails at the piece that holds it, with
///   [`Error::InvalidUtf8`].
/// - Dropping it in mid-message (or cancelling a poll) loses nothing: the
///   rest of the message comes from the connection as [`Message::Frame`]s.
///
/// ```no_run
/// // Needs tokio-util.
/// use futures_util::StreamExt;
/// use tokio_util::io::StreamReader;
///
/// # async fn run(mut ws: wavesock::WebSocketStream<tokio::net::TcpStream>) -> wavesock::Result<()> {
/// // With Config::stream_messages(true): a message of any size, to a file.
/// let mut file = tokio::fs::File::create("upload.bin").await?;
/// let pieces = ws.next_message_pieces();
/// tokio::io::copy(&mut StreamReader::new(pieces), &mut file).await?;
///
/// // Or piece by piece:
/// let mut pieces = ws.next_message_pieces();
/// while let Some(piece) = pieces.next().await {
///     let piece: wavesock::Bytes = piece?;
///     // ...
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "streams do nothing unless polled"]
pub struct MessagePieces<'a, St: ?Sized> {
    stream: &'a mut St,
    opcode: Option<OpCode>,
    finished: bool,
}

impl<'a, St: ?Sized> MessagePieces<'a, St> {
    /// The pieces of the next data message from any stream of messages.
    pub fn new(stream: &'a mut St) -> Self {
        MessagePieces {
            stream,
            opcode: None,
            finished: false,
        }
    }

    /// [`OpCode::Text`] or [`OpCode::Binary`] once the message has started.
    pub fn opcode(&self) -> Option<OpCode> {
        self.opcode
    }

    /// Whether the stream has ended: the message is complete, or it failed,
    /// or the connection ended first.
    pub fn is_finished(&self) -> bool {
        self.finished
    }
}

impl<St> Stream for MessagePieces<'_, St>
where
    St: Stream<Item = Result<Message>> + Unpin + ?Sized,
{
    type Item = Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes>>> {
        let this = self.get_mut();
        while !this.finished {
            let started = this.opcode.is_some();
            let (fin, payload) = match ready!(this.stream.poll_next_unpin(cx)) {
                Some(Ok(Message::Frame(f))) => {
                    this.opcode.get_or_insert(f.opcode);
                    (f.fin, f.payload)
                }
                // Not streaming: the whole message at once.
                Some(Ok(Message::Text(t))) if !started => {
                    this.opcode = Some(OpCode::Text);
                    (true, t.into_bytes())
                }
                Some(Ok(Message::Binary(b))) if !started => {
                    this.opcode = Some(OpCode::Binary);
                    (true, b)
                }
                Some(Ok(Message::Close(_))) | None => {
                    this.finished = true;
                    return Poll::Ready(started.then_some(Err(Error::ConnectionClosed)));
                }
                Some(Err(e)) => {
                    this.finished = true;
                    return Poll::Ready(Some(Err(e)));
                }
                // Pings and pongs, answered by the connection already.
                Some(Ok(_)) => continue,
            };
            this.finished = fin;
            if !payload.is_empty() {
                return Poll::Ready(Some(Ok(payload)));
            }
        }
        Poll::Ready(None)
    }
}

/// Sends `chunks` as the fragments of one message through `sink`.
async fn send_pieces<Si, St, B, E>(sink: &mut Si, opcode: OpCode, chunks: St) -> Result<()>
where
    Si: Sink<Message, Error = Error> + Unpin + ?Sized,
    St: Stream<Item = std::result::Result<B, E>>,
    B: Into<Bytes>,
    E: Into<Error>,
{
    if !matches!(opcode, OpCode::Text | OpCode::Binary) {
        return Err(Error::InvalidMessage(
            "a message in pieces is text or binary",
        ));
    }
    let mut chunks = pin!(chunks);
    let mut next_opcode = opcode;
    loop {
        // Write out what is buffered whenever the source has nothing ready:
        // a slow source's chunks go out at once, a fast one's together.
        let item = match chunks.next().now_or_never() {
            Some(item) => item,
            None => {
                sink.flush().await?;
                chunks.next().await
            }
        };
        let Some(chunk) = item else { break };
        let chunk: Bytes = chunk.map_err(Into::into)?.into();
        if chunk.is_empty() {
            continue;
        }
        // `feed` waits while the write buffer is full: backpressure.
        sink.feed(Message::Frame(Frame::new(false, next_opcode, chunk)))
            .await?;
        next_opcode = OpCode::Continuation;
    }
    // The end is known only now: an empty final fragment.
    sink.feed(Message::Frame(Frame::new(true, next_opcode, Bytes::new())))
        .await?;
    sink.flush().await
}

/// Sends what `reader` holds, read `chunk_size` bytes at most at a time.
async fn send_reader<Si, R>(
    sink: &mut Si,
    opcode: OpCode,
    reader: R,
    chunk_size: usize,
) -> Result<()>
where
    Si: Sink<Message, Error = Error> + Unpin + ?Sized,
    R: AsyncRead,
{
    if chunk_size == 0 {
        return Err(Error::InvalidMessage("chunk_size must be at least 1"));
    }
    send_pieces(
        sink,
        opcode,
        ReaderStream::with_capacity(reader, chunk_size),
    )
    .await
}

impl<S> WebSocketStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    /// The payload of the next text or binary message, piece by piece; see
    /// [`MessagePieces`]. Turn on
    /// [`Config::stream_messages`](crate::Config::stream_messages) for
    /// pieces as the bytes arrive; otherwise the message is assembled first.
    pub fn next_message_pieces(&mut self) -> MessagePieces<'_, Self> {
        MessagePieces::new(self)
    }

    /// Sends one text or binary message made of `chunks`, each as a
    /// fragment: the first with `opcode`, the others as continuations, then
    /// an empty final fragment (the end is known only when `chunks` ends).
    /// Fragments go out through the [`Sink`], so the write buffer bounds
    /// memory: a slow peer makes this wait instead of buffering more.
    ///
    /// For text, chunks may split code points, but the message as a whole
    /// must be valid UTF-8: the peer checks it across fragments and closes
    /// the connection (1007) if it is not. Keep chunks below the peer's
    /// largest accepted frame.
    ///
    /// If `chunks` yields an error, it is returned and the message is left
    /// unfinished, as it is if this future is dropped before it completes:
    /// no other data message can follow, so close the connection.
    ///
    /// ```no_run
    /// use futures_util::stream;
    /// use wavesock::{Bytes, OpCode};
    ///
    /// # async fn run(mut ws: wavesock::WebSocketStream<tokio::net::TcpStream>) -> wavesock::Result<()> {
    /// let chunks = (0..1000).map(|i| Ok::<_, std::io::Error>(Bytes::from(format!("line {i}\n"))));
    /// ws.send_pieces(OpCode::Text, stream::iter(chunks)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_pieces<St, B, E>(&mut self, opcode: OpCode, chunks: St) -> Result<()>
    where
        St: Stream<Item = std::result::Result<B, E>>,
        B: Into<Bytes>,
        E: Into<Error>,
    {
        send_pieces(self, opcode, chunks).await
    }

    /// Sends everything `reader` holds as one text or binary message, read
    /// and sent `chunk_size` bytes at most at a time; see
    /// [`send_pieces`](Self::send_pieces). A `chunk_size` of 0 is an error.
    ///
    /// ```no_run
    /// use wavesock::OpCode;
    ///
    /// # async fn run(mut ws: wavesock::WebSocketStream<tokio::net::TcpStream>) -> wavesock::Result<()> {
    /// let file = tokio::fs::File::open("big.iso").await?;
    /// ws.send_reader(OpCode::Binary, file, 64 << 10).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_reader<R: AsyncRead>(
        &mut self,
        opcode: OpCode,
        reader: R,
        chunk_size: usize,
    ) -> Result<()> {
        send_reader(self, opcode, reader, chunk_size).await
    }
}

impl<S> WebSocketReceiver<S>
where
    S: AsyncRead + AsyncWrite,
{
    /// The payload of the next text or binary message, piece by piece; see
    /// [`MessagePieces`] and [`WebSocketStream::next_message_pieces`].
    pub fn next_message_pieces(&mut self) -> MessagePieces<'_, Self> {
        MessagePieces::new(self)
    }
}

impl<S> WebSocketSender<S>
where
    S: AsyncRead + AsyncWrite,
{
    /// Sends one message made of `chunks`, as
    /// [`WebSocketStream::send_pieces`] does.
    pub async fn send_pieces<St, B, E>(&mut self, opcode: OpCode, chunks: St) -> Result<()>
    where
        St: Stream<Item = std::result::Result<B, E>>,
        B: Into<Bytes>,
        E: Into<Error>,
    {
        send_pieces(self, opcode, chunks).await
    }

    /// Sends what `reader` holds as one message, as
    /// [`WebSocketStream::send_reader`] does.
    pub async fn send_reader<R: AsyncRead>(
        &mut self,
        opcode: OpCode,
        reader: R,
        chunk_size: usize,
    ) -> Result<()> {
        send_reader(self, opcode, reader, chunk_size).await
    }
}
