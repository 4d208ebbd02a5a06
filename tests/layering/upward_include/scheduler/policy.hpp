// The header a lower layer must not include.
#pragma once
