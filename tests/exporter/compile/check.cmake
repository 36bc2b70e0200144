# cmake -DCXX=... -DSOURCE=... -DINCLUDES="a;b" [-DFLAGS="f;g"] -P check.cmake
# A family named at compile time must have a row in the contract table:
# the source compiles as it is and fails, naming the reason, with
# GYM_UNKNOWN_FAMILY defined.
set(flags -std=c++20 -fsyntax-only ${FLAGS})
foreach(dir ${INCLUDES})
  list(APPEND flags -I${dir})
endforeach()
execute_process(COMMAND ${CXX} ${flags} ${SOURCE} RESULT_VARIABLE known OUTPUT_VARIABLE out
                ERROR_VARIABLE out)
if(NOT known EQUAL 0)
  message(FATAL_ERROR "a family with a row does not compile:\n${out}")
endif()
execute_process(COMMAND ${CXX} ${flags} -DGYM_UNKNOWN_FAMILY ${SOURCE} RESULT_VARIABLE unknown
                OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(unknown EQUAL 0)
  message(FATAL_ERROR "a family with no row compiles")
endif()
if(NOT out MATCHES "family_name_has_no_row_in_the_contract_table")
  message(FATAL_ERROR "a family with no row fails to compile for another reason:\n${out}")
endif()
message(STATUS "a family with no row does not compile, as it should")
