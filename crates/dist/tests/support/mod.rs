//! Helpers shared by the dist tests.
#![allow(dead_code)]

pub mod collectives;
pub mod ddp_model;
