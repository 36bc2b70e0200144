// Compiled by tests/exporter/compile/check.cmake, twice: as is it must
// compile; with GYM_UNKNOWN_FAMILY it must not, and the compiler must say why.
#include "contract/families.h"
int main() {
  gym::exporter::Families out;
#ifdef GYM_UNKNOWN_FAMILY
  gym::exporter::add_family(out, "gym_no_such_family");
#else
  gym::exporter::add_family(out, "gym_server_up");
#endif
}
