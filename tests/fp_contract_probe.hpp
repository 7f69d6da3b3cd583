// tests/fp_contract_probe.cpp, compiled where g++ fuses a * b + c (tests/CMakeLists.txt)
#pragma once

float probe_plain_mad(float a, float b, float c);
float probe_rn_mad(float a, float b, float c);
double probe_rn_mad(double a, double b, double c);
