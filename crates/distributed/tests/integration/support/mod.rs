//! Helpers shared by the distributed tests.
#![allow(dead_code)]

pub mod collectives;
pub mod ddp_model;
pub mod outcome;
pub mod standin_nccl;
