# 2 nodes x 2 ranks in network namespaces (tools/netns-nodes.sh): the
# collectives with ANTDT_ALGO=hierarchical (AllReduce, ReduceScatter,
# AllGather(v), Broadcast all hierarchical, checked on each call's TRACE
# selection line) and auto (both sides of the threshold), and the partial
# AllReduce, launched with the launcher-neutral variables. Skipped (exit 77) where
# namespaces cannot be made (not root, no veth or bridge). About 20 s.
add_test(NAME integration.netns.two_nodes
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/netns_collectives.sh ${PROJECT_SOURCE_DIR}/tools/netns-nodes.sh
                 $<TARGET_FILE:antdt_mpi_collectives_test> $<TARGET_FILE:antdt_mpi_partial_test>)
set_tests_properties(integration.netns.two_nodes PROPERTIES
  TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS "integration" PROCESSORS 2 RESOURCE_LOCK antdt_multiprocess)
