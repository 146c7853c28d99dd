//! `grpc_arg_stack_t`: a call's arguments pushed one by one, as pointers.

use std::ffi::c_void;

/// An arg stack: at most `capacity` pointers.
pub struct ArgStack {
    capacity: usize,
    pub args: Vec<*mut c_void>,
}

impl ArgStack {
    pub fn new(capacity: usize) -> ArgStack {
        ArgStack {
            capacity,
            args: Vec::with_capacity(capacity.min(1024)),
        }
    }

    /// Pushes `arg`; false when the stack is full.
    pub fn push(&mut self, arg: *mut c_void) -> bool {
        if self.args.len() >= self.capacity {
            return false;
        }
        self.args.push(arg);
        true
    }

    pub fn pop(&mut self) -> Option<*mut c_void> {
        self.args.pop()
    }
}
