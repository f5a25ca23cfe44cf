//! The memory bounds, one binary with a counting allocator: limits checked
//! before allocation, the memory budget under hostile peers, decompression
//! bombs, memory per idle connection and per message on every engine, and
//! a 1 GiB message streamed in bounded memory. Each test runs in a process
//! of its own (`support::child::alone`), so what it counts is its own.

#[path = "../support/mod.rs"]
mod support;

#[global_allocator]
static GLOBAL: support::counting::Counting = support::counting::Counting;

mod alloc;
mod budget;
mod deflate_alloc;
mod deflate_memory;
mod hot_path;
mod hub_memory;
mod idle_memory;
mod stream_memory;
