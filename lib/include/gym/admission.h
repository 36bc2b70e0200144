// How a wait for a slot ends without one: the exceptions MeteredSemaphore
// throws, which ResourcesOperation tells apart (a timeout or a
// cancellation) when it records an abandoned wait.
//
// API (docs/api.md): AdmissionError, AdmissionTimeout, AdmissionCancelled.
#pragma once

#include <stdexcept>

namespace gym {

// A wait for a slot that ended without one.
class AdmissionError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};
// No slot became free within the admission timeout.
class AdmissionTimeout : public AdmissionError {
  using AdmissionError::AdmissionError;
};
// The wait was cancelled (its stop_token) before a slot was free.
class AdmissionCancelled : public AdmissionError {
  using AdmissionError::AdmissionError;
};

}  // namespace gym
