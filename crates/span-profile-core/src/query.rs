//! Queries over profiles (being written).
