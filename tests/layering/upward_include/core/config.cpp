// A core file that includes a scheduler header: check_layers must refuse it.
#include "scheduler/policy.hpp"
