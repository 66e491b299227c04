# Debian packages, one per component (`cpack -G DEB` in the build tree, or the packaging test):
#   zk-agent        /usr/bin/zk-agent, its systemd unit, /etc/zkagent/agent.json + accounts.txt
#   fencing-gateway /usr/bin/fencing-gateway, its unit (StateDirectory /var/lib/fencing-gateway),
#                   /etc/zkagent/fencing-gateway.json + .env
#   zkagent-tools   /usr/bin/zk-agentctl, /usr/bin/zk-elect, /usr/bin/zk-token
# Each service package creates its own system user (sysusers.d, adduser as a fallback).
# Depends come from packaging/dependencies, the list scripts/setup installs from (test-packages
# checks them against what dpkg-shlibdeps finds the binaries link). Included last from the
# top-level CMakeLists.txt, after the targets exist.
set(_pkg ${CMAKE_CURRENT_LIST_DIR})
set(_doc ${PROJECT_SOURCE_DIR}/docs)

install(TARGETS zk-agent RUNTIME DESTINATION bin COMPONENT agent)
install(FILES ${_pkg}/systemd/zk-agent.service DESTINATION /lib/systemd/system COMPONENT agent)
install(FILES ${_pkg}/sysusers/zk-agent.conf DESTINATION /usr/lib/sysusers.d COMPONENT agent)
install(FILES ${_pkg}/config/agent.json ${_pkg}/config/accounts.txt DESTINATION /etc/zkagent
        COMPONENT agent)
install(FILES ${_doc}/operator-guide.md ${_doc}/configuration.md ${_doc}/agent.md
        DESTINATION share/doc/zk-agent COMPONENT agent)

install(TARGETS fencing-gateway RUNTIME DESTINATION bin COMPONENT gateway)
install(FILES ${_pkg}/systemd/fencing-gateway.service DESTINATION /lib/systemd/system
        COMPONENT gateway)
install(FILES ${_pkg}/sysusers/fencing-gateway.conf DESTINATION /usr/lib/sysusers.d
        COMPONENT gateway)
install(FILES ${_pkg}/config/fencing-gateway.json DESTINATION /etc/zkagent COMPONENT gateway)
# The env file may hold the gateway's bearer token: root only (systemd reads it as root).
install(FILES ${_pkg}/config/fencing-gateway.env DESTINATION /etc/zkagent
        PERMISSIONS OWNER_READ OWNER_WRITE COMPONENT gateway)
install(FILES ${_doc}/gateway.md ${_doc}/fencing.md DESTINATION share/doc/fencing-gateway
        COMPONENT gateway)

install(TARGETS zk-agentctl zk-elect zk-token RUNTIME DESTINATION bin COMPONENT tools)
install(FILES ${_doc}/election.md DESTINATION share/doc/zkagent-tools COMPONENT tools)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME zkagent)
set(CPACK_PACKAGE_VENDOR zkagent)
set(CPACK_PACKAGE_CONTACT "zkagent maintainers <zkagent@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_COMPONENTS_ALL agent gateway tools)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# /etc/zkagent/ and /lib/systemd/ are absolute destinations on purpose (a package's layout).
set(CPACK_WARN_ON_ABSOLUTE_INSTALL_DESTINATION OFF)

# conffiles: dpkg keeps an operator's edits across upgrades.
file(WRITE ${CMAKE_BINARY_DIR}/packaging/agent/conffiles
     "/etc/zkagent/agent.json\n/etc/zkagent/accounts.txt\n")
file(WRITE ${CMAKE_BINARY_DIR}/packaging/gateway/conffiles
     "/etc/zkagent/fencing-gateway.json\n/etc/zkagent/fencing-gateway.env\n")

# Editing the list re-runs the configure step, so the packages never carry an old list.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_pkg}/dependencies)
foreach(_component agent gateway tools)
  string(TOUPPER ${_component} _upper)
  execute_process(COMMAND ${_pkg}/list-dependencies --depends ${_component}
                  OUTPUT_VARIABLE CPACK_DEBIAN_${_upper}_PACKAGE_DEPENDS
                  OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
endforeach()

set(CPACK_DEBIAN_AGENT_PACKAGE_NAME zk-agent)
set(CPACK_COMPONENT_AGENT_DESCRIPTION "Leader-election agent for IM accounts over ZooKeeper\nStands for every configured account on one ZooKeeper session; exactly one agent leads an\naccount at a time and forwards its operations with a fencing token.")
set(CPACK_DEBIAN_AGENT_PACKAGE_RECOMMENDS zkagent-tools)
set(CPACK_DEBIAN_AGENT_PACKAGE_CONTROL_EXTRA
    ${CMAKE_BINARY_DIR}/packaging/agent/conffiles ${_pkg}/debian/zk-agent/postinst
    ${_pkg}/debian/zk-agent/prerm ${_pkg}/debian/zk-agent/postrm)

set(CPACK_DEBIAN_GATEWAY_PACKAGE_NAME fencing-gateway)
set(CPACK_COMPONENT_GATEWAY_DESCRIPTION "Downstream gateway accepting operations only with a current fencing token\nKeeps a durable high-water mark per account and checks tokens against ZooKeeper's current\nleader, so a paused or partitioned old leader can never get an operation through.")
set(CPACK_DEBIAN_GATEWAY_PACKAGE_CONTROL_EXTRA
    ${CMAKE_BINARY_DIR}/packaging/gateway/conffiles ${_pkg}/debian/fencing-gateway/postinst
    ${_pkg}/debian/fencing-gateway/prerm ${_pkg}/debian/fencing-gateway/postrm)

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME zkagent-tools)
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "Operator tools for zk-agent\nzk-agentctl (status, leaders, resign, drain over the agent's admin API) and zk-elect (stands\nfor accounts and prints election events, for scripts) and zk-token (signs device and viewer\ntokens for trying authentication out).")

include(CPack)

# Builds the packages and inspects them (dpkg-deb, --check-config, systemd-analyze verify).
add_test(NAME packaging.debs COMMAND ${_pkg}/test-packages ${CMAKE_BINARY_DIR})
set_tests_properties(packaging.debs PROPERTIES LABELS "packaging" TIMEOUT 180)
