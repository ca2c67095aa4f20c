#!/usr/bin/env bash
# Compiles the library and its tests with javac -Xlint:all -Werror into build/ (no Maven needed):
# build/classes (the library), build/test-classes, build/leasehold-client.jar, and build/classpath
# (what the tests and the mixed-history worker run on). Needs the Debian jars check.sh installs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
jars=/usr/share/java
for j in jackson-databind jackson-core jackson-annotations junit-platform-console-standalone postgresql; do
  [ -f "$jars/$j.jar" ] || { echo "missing $jars/$j.jar: run clients/java/check.sh (it installs libjackson2-databind-java junit5 libpostgresql-jdbc-java)" >&2; exit 1; }
done
lib="$jars/jackson-databind.jar:$jars/jackson-core.jar:$jars/jackson-annotations.jar"
cd "$here"
rm -rf build/classes build/test-classes
mkdir -p build/classes build/test-classes
javac -Xlint:all -Werror --release 17 -encoding UTF-8 -d build/classes -cp "$lib" $(find src/main/java -name '*.java')
jar --create --file build/leasehold-client.jar -C build/classes .
javac -Xlint:all -Werror --release 17 -encoding UTF-8 -d build/test-classes \
  -cp "build/classes:$lib:$jars/junit-platform-console-standalone.jar:$jars/postgresql.jar" $(find src/test/java -name '*.java')
echo "$here/build/classes:$here/build/test-classes:$lib:$jars/postgresql.jar" > build/classpath
# The examples README.md and docs/clients.md show, compiled with the same flags.
mkdir -p build/examples
javac -Xlint:all -Werror --release 17 -encoding UTF-8 -d build/examples -cp "build/classes:$lib" examples/*.java
