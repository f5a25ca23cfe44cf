//! Topics across servers through Redis.
