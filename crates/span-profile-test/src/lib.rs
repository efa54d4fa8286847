//! Test fakes (filled in below).
