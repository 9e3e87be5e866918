/**
 * Binding one physical GPU to one rank for Vulkan users (WebGPU through Dawn).
 *
 * `CUDA_VISIBLE_DEVICES` does not reach Vulkan, and identical GPUs share one adapter name and
 * one vendor:device id, so neither Dawn's `adapter=` flag nor `MESA_VK_DEVICE_SELECT=vid:did`
 * can tell them apart. What works (measured on 2 x H200, see docs/gpu-selection.md) is Mesa's
 * device-select Vulkan layer on top of the NVIDIA driver: `DRI_PRIME=pci-DDDD_BB_SS_F` picks
 * the GPU by PCI address and `MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE=1` hides the others.
 * The layer comes from Debian's `mesa-vulkan-drivers` (installed: an implicit layer) or from a
 * folder named by `REACTOR_VK_LAYER_PATH` (the deploy bundle carries it: an explicit layer).
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

/** Name of Mesa's device-select layer. */
export const DEVICE_SELECT_LAYER = 'VK_LAYER_MESA_device_select';
const LAYER_JSON = 'VkLayer_MESA_device_select.json';
/** Where Vulkan loaders look for implicit layers (the ones `mesa-vulkan-drivers` installs). */
const IMPLICIT_LAYER_DIRS = ['/usr/share/vulkan/implicit_layer.d', '/etc/vulkan/implicit_layer.d', '/usr/local/share/vulkan/implicit_layer.d'];

/** PCI addresses of the NVIDIA GPUs, in index order (`nvidia-smi` order), from the driver's /proc tree. */
export function nvidiaPciAddresses(dir = '/proc/driver/nvidia/gpus'): string[] {
  try {
    return readdirSync(dir)
      .filter((d) => /^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/i.test(d))
      .sort();
  } catch {
    return [];
  }
}

/** `0000:00:06.0` -> `pci-0000_00_06_0`, the `DRI_PRIME` tag Mesa's layer matches. */
export function driPrimeTag(pci: string): string {
  const m = /^([0-9a-f]+):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$/i.exec(pci);
  if (!m) throw new RangeError(`not a PCI address (domain:bus:slot.function): ${JSON.stringify(pci)}`);
  const [, domain, bus, slot, fn] = m as unknown as [string, string, string, string, string];
  return `pci-${parseInt(domain, 16).toString(16).padStart(4, '0')}_${bus.toLowerCase()}_${slot.toLowerCase()}_${fn}`;
}

/** Where the device-select layer is: `{ explicitDir }` for a carried copy, `{ implicit: true }` when installed. */
export type DeviceSelectLayer = { explicitDir: string } | { implicit: true };

/** Finds Mesa's device-select layer: `REACTOR_VK_LAYER_PATH` first, then the installed implicit layer. */
export function findDeviceSelectLayer(env: NodeJS.ProcessEnv = process.env, implicitDirs = IMPLICIT_LAYER_DIRS): DeviceSelectLayer | undefined {
  const carried = env['REACTOR_VK_LAYER_PATH'];
  if (carried && existsSync(join(carried, LAYER_JSON))) return { explicitDir: carried };
  return implicitDirs.some((d) => existsSync(join(d, LAYER_JSON))) ? { implicit: true } : undefined;
}

/**
 * Environment variables that make Vulkan (and so WebGPU) in one process see only the GPU at
 * `pciAddresses[gpuIndex]`.
 * @throws RangeError when `gpuIndex` has no PCI address (more ranks than GPUs the driver lists).
 */
export function vulkanDeviceSelectEnv(
  gpuIndex: number,
  pciAddresses: readonly string[],
  layer: DeviceSelectLayer,
  base: NodeJS.ProcessEnv = {},
): Record<string, string> {
  const pci = pciAddresses[gpuIndex];
  if (pci === undefined) {
    throw new RangeError(
      `GPU ${gpuIndex} has no PCI address: the NVIDIA driver lists ${pciAddresses.length} GPU(s) (${pciAddresses.join(', ') || 'none'}) in /proc/driver/nvidia/gpus`,
    );
  }
  const env: Record<string, string> = { DRI_PRIME: driPrimeTag(pci), MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE: '1', REACTOR_GPU_PCI: pci };
  if ('explicitDir' in layer) {
    env['VK_LAYER_PATH'] = [layer.explicitDir, base['VK_LAYER_PATH']].filter(Boolean).join(':');
    const layers = (base['VK_INSTANCE_LAYERS'] ?? '').split(':').filter((l) => l && l !== DEVICE_SELECT_LAYER);
    env['VK_INSTANCE_LAYERS'] = [DEVICE_SELECT_LAYER, ...layers].join(':');
  }
  return env;
}
