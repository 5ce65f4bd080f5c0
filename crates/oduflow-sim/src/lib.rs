//! Vultr simulator (issue 3).
