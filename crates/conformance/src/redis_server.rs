//! Starts a private redis-server for tests.
