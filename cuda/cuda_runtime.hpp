// Whether this process can use a CUDA GPU. Safe to call in every build: without
// CUDA support compiled in (or without a driver, or without a device) it reports
// zero devices and says why, so callers and tests can fall back or skip cleanly.
#pragma once

#include <string>

namespace antdt::cuda {

// Number of visible CUDA devices; 0 when the library was built without CUDA,
// when no driver is loaded, or when no device is visible (CUDA_VISIBLE_DEVICES).
int device_count() noexcept;

inline bool available() noexcept { return device_count() > 0; }

// Why available() is false, naming the cause; "" when a device is available.
std::string unavailable_reason();

}  // namespace antdt::cuda
